//! The table's lifecycle rules. Each test uses its own descriptor numbers: the table is global
//! and tests run in parallel.
use super::*;

#[test]
fn a_copy_knows_what_its_source_knows() {
    opened(100, Kind::Known(NetKind::Tcp));
    swapped_listener(100, 8080);
    learned_ports(100, Ports { local: 8080, peer: 40000 });
    opened(101, Kind::Other);
    duplicated(100, 101);
    assert_eq!(known(101), Kind::Known(NetKind::Tcp));
    assert_eq!(public_port(101), Some(8080));
    assert_eq!(ports(101), Some(Ports { local: 8080, peer: 40000 }));
    // The source keeps its knowledge; closing the copy forgets only the copy.
    closed(101);
    assert_eq!(known(101), Kind::Unknown);
    assert_eq!(public_port(101), None);
    assert_eq!(known(100), Kind::Known(NetKind::Tcp));
}

#[test]
fn a_socket_duplicated_over_a_file_is_a_socket_and_back() {
    opened(110, Kind::Other);
    opened(111, Kind::Known(NetKind::Socket));
    duplicated(111, 110);
    assert_eq!(known(110), Kind::Known(NetKind::Socket));
    opened(112, Kind::Unknown);
    duplicated(112, 111);
    assert_eq!(known(111), Kind::Unknown, "a socket a file was copied over must be asked again");
}

#[test]
fn a_copy_of_an_untracked_number_is_asked_again() {
    opened(120, Kind::Net);
    duplicated(TRACKED as c_int + 5, 120);
    assert_eq!(known(120), Kind::Unknown);
    // Numbers the table does not keep: nothing remembered, nothing panics.
    duplicated(120, TRACKED as c_int + 6);
    learned(TRACKED as c_int, Kind::Net);
    assert_eq!(known(TRACKED as c_int), Kind::Unknown);
    assert_eq!(known(-1), Kind::Unknown);
}

#[test]
fn a_closed_range_forgets_exactly_its_numbers() {
    for fd in 130..140 {
        opened(fd, Kind::Net);
        swapped_listener(fd, 9000);
    }
    closed_range(132, 137);
    for fd in 130..140 {
        let inside = (132..=137).contains(&fd);
        assert_eq!(known(fd) == Kind::Unknown, inside, "descriptor {fd}");
        assert_eq!(public_port(fd).is_none(), inside, "descriptor {fd}");
    }
    // A range past the table, and one that ends at the largest number, stay in bounds.
    closed_range(TRACKED as u64 + 1, u64::from(u32::MAX));
    closed_range(139, u64::MAX);
    assert_eq!(known(139), Kind::Unknown);
    assert_eq!(known(138), Kind::Net);
}

#[test]
fn a_new_number_forgets_its_previous_holder() {
    opened(150, Kind::Known(NetKind::Tcp));
    learned_ports(150, Ports { local: 1, peer: 2 });
    // Closed where no hook saw it (inside libc), then made again.
    opened(150, Kind::Unknown);
    assert_eq!(known(150), Kind::Unknown);
    assert_eq!(ports(150), None);
}

#[test]
fn every_kind_survives_its_encoding() {
    for kind in [Kind::Unknown, Kind::Other, Kind::Output, Kind::Net, Kind::Known(NetKind::Tcp), Kind::Known(NetKind::Socket), Kind::Known(NetKind::NotSocket)] {
        assert_eq!(Kind::from_u8(kind.to_u8()), kind);
    }
}
