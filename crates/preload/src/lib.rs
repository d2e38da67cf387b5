#[no_mangle] pub extern "C" fn dara_x(){}
