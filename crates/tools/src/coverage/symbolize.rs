//! Function and file:line of an instrumented site, from the binary's DWARF (the `addr2line`
//! crate), with the ELF symbol table as the fallback when there is no line information.
//!
//! A site is a return address, so it is looked up one byte earlier, inside the `call` itself: the
//! byte after the call may already belong to the next line or function. Of an inlined call chain
//! the innermost frame's function is reported, because that is the source the edge belongs to (a
//! `case` whose handler was inlined is reported in the handler). Its line, when the compiler
//! gave it none (clang marks some inlined code line 0), comes from the nearest enclosing frame
//! that has one: the line the function was inlined at.
use std::path::Path;

/// Where a site is in the source.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Place {
    /// Function name (demangled), `?` when unknown.
    pub function: String,
    /// Source file, when the DWARF says.
    pub file: Option<String>,
    pub line: Option<u32>,
}

impl Place {
    /// `cov_branches.c:19`, or `?` without line information.
    pub fn file_line(&self) -> String {
        match (&self.file, self.line) {
            (Some(f), Some(l)) => format!("{}:{l}", Path::new(f).file_name().map_or(f.as_str().into(), |n| n.to_string_lossy())),
            (Some(f), None) => f.clone(),
            _ => "?".into(),
        }
    }
}

/// One binary's debug information, loaded once.
pub struct Symbolizer {
    loader: Option<addr2line::Loader>,
}

impl Symbolizer {
    /// Loads `path`, or its separate debug file when one is installed (a stripped Debian binary
    /// and its `-dbgsym` package); a binary without readable debug information still gets symbol
    /// names.
    pub fn open(path: &Path) -> Symbolizer {
        let debug = dara_tracer::debug_file::companion(path);
        Symbolizer { loader: addr2line::Loader::new(debug.as_deref().unwrap_or(path)).ok() }
    }

    /// A symbolizer that knows nothing (the binary could not be read).
    pub fn none() -> Symbolizer {
        Symbolizer { loader: None }
    }

    pub fn place(&self, site: u64) -> Place {
        let Some(loader) = &self.loader else { return Place { function: "?".into(), ..Place::default() } };
        let probe = site.saturating_sub(1);
        let mut place = Place::default();
        if let Ok(mut frames) = loader.find_frames(probe) {
            let mut innermost = true;
            while let Ok(Some(frame)) = frames.next() {
                if innermost {
                    if let Some(f) = frame.function.as_ref().and_then(|f| f.demangle().ok()) {
                        place.function = f.into_owned();
                    }
                    innermost = false;
                }
                if let Some(loc) = frame.location {
                    if place.file.is_none() {
                        place.file = loc.file.map(str::to_string);
                    }
                    if let Some(line) = loc.line.filter(|&l| l != 0) {
                        place.file = loc.file.map(str::to_string).or(place.file.take());
                        place.line = Some(line);
                        break;
                    }
                }
            }
        }
        if place.function.is_empty() {
            place.function = loader.find_symbol(probe).map(|s| addr2line::demangle_auto(s.into(), None).into_owned()).unwrap_or_else(|| "?".into());
        }
        place
    }
}
