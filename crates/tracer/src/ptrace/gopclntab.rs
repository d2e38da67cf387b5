//! Function entry points of a Go program from its `.gopclntab`, the table Go's runtime keeps for
//! stack traces. Programs as distributed are stripped (Debian's etcd has no `.symtab`), but this
//! table stays: the agent finds its preemption probes ([`super::probes`]) there.
//!
//! Layouts read (x86-64, little-endian), after an 8-byte header (magic, two zero bytes, the pc
//! quantum, the pointer size) and a run of pointer-sized words:
//! * Go 1.18 and later (magic `0xfffffff0`, `0xfffffff1` since 1.20): words `nfunc`, `nfiles`,
//!   `textStart` (where entry offsets count from: `runtime.text`), then the offsets of the function-name table (word 3) and of the function
//!   table (word 7); a function-table entry is two `u32`: the entry's offset from the start of
//!   the text and the offset of the function's record, whose second `u32` is the offset of its
//!   name;
//! * Go 1.16 and 1.17 (magic `0xfffffffa`): words `nfunc`, `nfiles`, then the name table (word
//!   2) and the function table (word 6); entries are two pointer-sized words, the entry's address
//!   itself and the record's offset; a record starts with the entry's address, then the name's
//!   offset (`u32`).
//!
//! Older tables (Go 1.2 to 1.15) are not read: such programs get no probes from here. Anything
//! malformed gives no functions, never a panic.
use std::collections::BTreeMap;

const GO116: u32 = 0xffff_fffa;
const GO118: u32 = 0xffff_fff0;
const GO120: u32 = 0xffff_fff1;
const POINTER: usize = 8;

/// The entry addresses (link-time) of the functions named in `wanted` that `pclntab` (the
/// section's bytes) lists; `text` is the address of the `.text` section, where Go 1.18's offsets
/// count from when the table does not say.
pub fn entries(pclntab: &[u8], text: u64, wanted: &[&str]) -> BTreeMap<String, u64> {
    let mut found = BTreeMap::new();
    let Some(table) = Table::parse(pclntab, text) else { return found };
    for i in 0..table.nfunc {
        let Some((entry, record)) = table.function(i) else { break };
        let Some(name) = table.name(record) else { continue };
        if wanted.contains(&name) {
            found.entry(name.to_string()).or_insert(entry);
        }
    }
    found
}

struct Table<'a> {
    data: &'a [u8],
    modern: bool,
    nfunc: usize,
    text: u64,
    names: usize,
    functions: usize,
}

impl<'a> Table<'a> {
    fn parse(data: &'a [u8], text: u64) -> Option<Table<'a>> {
        let magic = u32_at(data, 0)?;
        if data.get(4..8)? != [0, 0, 1, POINTER as u8] {
            return None;
        }
        let word = |n: usize| u64_at(data, 8 + n * POINTER).map(|w| w as usize);
        match magic {
            // The table's own text start (word 2) is `runtime.text`, past the C code at the
            // start of `.text` in a program linked with cgo.
            GO118 | GO120 => Some(Table { data, modern: true, nfunc: word(0)?, text: Some(word(2)? as u64).filter(|&t| t != 0).unwrap_or(text), names: word(3)?, functions: word(7)? }),
            GO116 => Some(Table { data, modern: false, nfunc: word(0)?, text, names: word(2)?, functions: word(6)? }),
            _ => None,
        }
    }

    /// Function `i`'s entry address and the offset of its record.
    fn function(&self, i: usize) -> Option<(u64, usize)> {
        if self.modern {
            let at = self.functions + i * 8;
            Some((self.text + u64::from(u32_at(self.data, at)?), u32_at(self.data, at + 4)? as usize))
        } else {
            let at = self.functions + i * 2 * POINTER;
            Some((u64_at(self.data, at)?, u64_at(self.data, at + POINTER)? as usize))
        }
    }

    fn name(&self, record: usize) -> Option<&'a str> {
        let entry_size = if self.modern { 4 } else { POINTER };
        let offset = u32_at(self.data, self.functions + record + entry_size)? as usize;
        let start = self.names.checked_add(offset)?;
        let bytes = self.data.get(start..)?;
        let end = bytes.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&bytes[..end]).ok()
    }
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(data.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(data: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(data.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of `functions` (name, entry offset from `text`) in the Go 1.18 layout.
    fn go118_table(functions: &[(&str, u32)]) -> Vec<u8> {
        let header_len = 8 + 8 * POINTER;
        let mut names = Vec::new();
        let mut name_offsets = Vec::new();
        for (name, _) in functions {
            name_offsets.push(names.len() as u32);
            names.extend(name.as_bytes());
            names.push(0);
        }
        let names_at = header_len;
        let functions_at = names_at + names.len();
        // The function table (n + 1 entries), then the records (entry offset, name offset).
        let records_at = (functions.len() + 1) * 8;
        let mut table = Vec::new();
        let mut records = Vec::new();
        for (i, (_, entry)) in functions.iter().enumerate() {
            table.extend(entry.to_le_bytes());
            table.extend(((records_at + records.len()) as u32).to_le_bytes());
            records.extend(entry.to_le_bytes());
            records.extend(name_offsets[i].to_le_bytes());
        }
        table.extend([0u8; 8]);
        let mut data = Vec::new();
        data.extend(GO118.to_le_bytes());
        data.extend([0, 0, 1, POINTER as u8]);
        for word in [functions.len(), 0, 0x40_1000, names_at, 0, 0, 0, functions_at] {
            data.extend((word as u64).to_le_bytes());
        }
        data.extend(names);
        data.extend(table);
        data.extend(records);
        data
    }

    #[test]
    fn finds_the_wanted_functions_by_name() {
        let data = go118_table(&[("main.main", 0x100), ("runtime.Gosched", 0x240), ("runtime.selectgo", 0x800)]);
        // The table's text start wins over the section's address.
        let found = entries(&data, 0x40_0f00, &["runtime.Gosched", "runtime.selectgo", "runtime.absent"]);
        assert_eq!(found.len(), 2);
        assert_eq!(found["runtime.Gosched"], 0x40_1240);
        assert_eq!(found["runtime.selectgo"], 0x40_1800);
    }

    #[test]
    fn malformed_tables_give_nothing() {
        let data = go118_table(&[("runtime.Gosched", 0x240)]);
        for cut in [0, 7, 20, data.len() - 3] {
            assert!(entries(&data[..cut], 0, &["runtime.Gosched"]).is_empty(), "cut at {cut}");
        }
        let mut foreign = data.clone();
        foreign[0] = 0xfb; // Go 1.2's magic: not read
        assert!(entries(&foreign, 0, &["runtime.Gosched"]).is_empty());
    }
}
