//! The preload's layering, checked: the crate doc lists the layers; every `crate::` and `super::`
//! path in every source file names a module of its own layer or a lower one, and no imports go
//! round in a circle. Reads the sources at test time (paths relative to the file, such as a
//! module's own submodules, are not followed).
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// Every source file's module path (`hooks::net`, `fd` for `fd/mod.rs`) and text, tests left out.
fn sources() -> BTreeMap<String, String> {
    fn walk(dir: &Path, prefix: &str, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_str().unwrap().to_string();
            if path.is_dir() {
                walk(&path, &format!("{prefix}{name}::"), out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let module = match name.as_str() {
                    "mod" => prefix.trim_end_matches("::").to_string(),
                    _ => format!("{prefix}{name}"),
                };
                let text = std::fs::read_to_string(&path).unwrap();
                let code = text.split("#[cfg(test)]").next().unwrap_or("");
                let code: String = code.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
                out.insert(module, code);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(Path::new(SRC), "", &mut out);
    for skip in ["lib", "layers", "fd::tests"] {
        out.remove(skip);
    }
    out
}

/// The crate doc's numbered layer list: listed module -> layer number.
fn listed_layers() -> BTreeMap<String, usize> {
    let doc = std::fs::read_to_string(Path::new(SRC).join("lib.rs")).unwrap();
    let mut layers = BTreeMap::new();
    let mut current = 0;
    for line in doc.lines().map_while(|l| l.strip_prefix("//!")).map(str::trim) {
        match line.split_once(". ").map(|(n, _)| n.parse::<usize>()) {
            Some(Ok(n)) => current = n,
            _ if line.is_empty() => current = 0,
            _ => {}
        }
        if current > 0 {
            for name in line.split('`').skip(1).step_by(2) {
                layers.insert(name.to_string(), current);
            }
        }
    }
    layers
}

/// The layer of `module`: that of its longest listed prefix.
fn layer_of(layers: &BTreeMap<String, usize>, module: &str) -> Option<usize> {
    let parts: Vec<&str> = module.split("::").collect();
    (1..=parts.len()).rev().find_map(|k| layers.get(&parts[..k].join("::")).copied())
}

/// The module a path (`gate::Gated`, `hooks::net::is_net`) names: its longest prefix that is one.
fn module_of(modules: &BTreeSet<String>, path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
    (1..=parts.len()).rev().map(|k| parts[..k].join("::")).find(|m| modules.contains(m))
}

/// The paths after `crate::` or `super::` in `code` (a `{..}` group gives one per item), as
/// absolute module paths (`parent`: the module `super` names).
fn paths(code: &str, parent: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (anchor, base) in [("crate::", String::new()), ("super::", format!("{parent}::"))] {
        for (at, _) in code.match_indices(anchor) {
            if code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let rest = &code[at + anchor.len()..];
            let head: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
            let head = head.trim_end_matches(':');
            let after = &rest[head.len()..].trim_start_matches(':');
            if after.starts_with('{') {
                let group = &after[1..after.find('}').unwrap_or(after.len())];
                for item in group.split([',', '{']).map(|i| i.trim().split([' ', ':']).next().unwrap_or("")).filter(|i| !i.is_empty()) {
                    let item = if item == "self" { String::new() } else { format!("::{item}") };
                    out.push(format!("{base}{head}{item}").trim_start_matches("::").to_string());
                }
            } else {
                out.push(format!("{base}{head}"));
            }
        }
    }
    out
}

#[test]
fn imports_point_down_and_never_round_in_a_circle() {
    let sources = sources();
    let layers = listed_layers();
    assert!(layers.len() > 20, "the crate doc's layer list was not found: {layers:?}");
    let modules: BTreeSet<String> = sources.keys().cloned().collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, code) in &sources {
        let own = layer_of(&layers, module).unwrap_or_else(|| panic!("module {module} is in no layer of the crate doc's list"));
        let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
        for path in paths(code, parent) {
            let Some(target) = module_of(&modules, &path) else { continue };
            if target == *module {
                continue;
            }
            let theirs = layer_of(&layers, &target).unwrap_or_else(|| panic!("module {target} is in no layer"));
            assert!(theirs <= own, "{module} (layer {own}) imports {path} from {target}, a higher layer ({theirs})");
            edges.entry(module.clone()).or_default().insert(target);
        }
    }
    // Depth-first search; a module met again while still on the path closes a circle.
    fn visit(m: &str, edges: &BTreeMap<String, BTreeSet<String>>, path: &mut Vec<String>, done: &mut BTreeSet<String>) {
        if done.contains(m) {
            return;
        }
        if let Some(at) = path.iter().position(|p| p == m) {
            panic!("imports go round in a circle: {} -> {m}", path[at..].join(" -> "));
        }
        path.push(m.to_string());
        for next in edges.get(m).into_iter().flatten() {
            visit(next, edges, path, done);
        }
        path.pop();
        done.insert(m.to_string());
    }
    let mut done = BTreeSet::new();
    for m in &modules {
        visit(m, &edges, &mut Vec::new(), &mut done);
    }
    // The check sees imports at all (a parser that found none would pass everything).
    assert!(edges.get("trapped").is_some_and(|e| e.contains("hooks::net") && e.contains("gate")), "{edges:?}");
}
