//! Dependencies point one way: no module imports one that imports it back, in any crate
//! of the workspace, and the link layer imports nothing above it.
//!
//! Reads the sources, collects every `crate::` and `super::` path (in `use` items and in
//! code, with `{...}` groups), resolves each to the module file it names, and looks for
//! cycles twice: between files (a module and its own submodules may refer to each other:
//! they are one unit) and between each crate's top-level modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (e.g. `["driver", "io"]`) to the file that holds it, for one crate.
fn modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(src).unwrap();
            let mut parts: Vec<String> = rel
                .iter()
                .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            out.insert(parts, p);
        }
    }
    out
}

/// Strips comments and string literals so that paths in prose do not count.
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// Every path that starts with `root::` in `code`, with `{a, b::{c, d}}` groups expanded.
fn paths_from(code: &str, root: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let pat = format!("{root}::");
    let mut at = 0;
    while let Some(k) = code[at..].find(&pat) {
        let start = at + k;
        at = start + pat.len();
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue; // `foo::crate::`, `xcrate::`: not ours
        }
        expand(&code[at..], Vec::new(), &mut found);
    }
    found
}

fn expand(rest: &str, prefix: Vec<String>, found: &mut Vec<Vec<String>>) {
    let rest = rest.trim_start();
    if let Some(inner) = rest.strip_prefix('{') {
        // Split the group at top-level commas.
        let (mut depth, mut from) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    expand_item(&inner[from..i], &prefix, found);
                    return;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_item(&inner[from..i], &prefix, found);
                    from = i + 1;
                }
                _ => {}
            }
        }
        return;
    }
    let ident: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    if ident.is_empty() {
        if !prefix.is_empty() {
            found.push(prefix);
        }
        return;
    }
    let mut p = prefix;
    p.push(ident.clone());
    match rest[ident.len()..].strip_prefix("::") {
        Some(more) => expand(more, p, found),
        None => found.push(p),
    }
}

fn expand_item(item: &str, prefix: &[String], found: &mut Vec<Vec<String>>) {
    let item = item.trim();
    if item.is_empty() || item == "self" {
        if !prefix.is_empty() {
            found.push(prefix.to_vec());
        }
        return;
    }
    expand(item, prefix.to_vec(), found);
}

/// The longest prefix of `path` that is a module of the crate.
fn module_of(path: &[String], mods: &BTreeMap<Vec<String>, PathBuf>) -> Vec<String> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| mods.contains_key(p))
        .unwrap_or_default()
}

/// Module path to file.
type Modules = BTreeMap<Vec<String>, PathBuf>;
/// Import edges (from, to) between modules.
type Edges = BTreeSet<(Vec<String>, Vec<String>)>;

/// Edges between module files of one crate: (from, to), ancestors excluded.
fn edges(src: &Path) -> (Modules, Edges) {
    let mods = modules(src);
    let mut e = BTreeSet::new();
    for (m, file) in &mods {
        let code = code_only(&std::fs::read_to_string(file).unwrap());
        let mut targets: Vec<Vec<String>> = paths_from(&code, "crate");
        // `super::` is relative to the module that holds the file.
        for p in paths_from(&code, "super") {
            let mut base = m.clone();
            base.pop();
            let mut rest = p.as_slice();
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
            base.extend_from_slice(rest);
            targets.push(base);
        }
        for t in targets {
            let to = module_of(&t, &mods);
            let related = to.starts_with(m) || m.starts_with(&to);
            if !related {
                e.insert((m.clone(), to));
            }
        }
    }
    (mods, e)
}

/// A cycle in the graph, if any, as the list of its nodes.
fn find_cycle(e: &Edges) -> Option<Vec<Vec<String>>> {
    let mut adj: BTreeMap<&Vec<String>, Vec<&Vec<String>>> = BTreeMap::new();
    for (a, b) in e {
        adj.entry(a).or_default().push(b);
    }
    // 0 = unseen, 1 = on the stack, 2 = done.
    let mut state: BTreeMap<&Vec<String>, u8> = BTreeMap::new();
    fn visit<'a>(
        n: &'a Vec<String>,
        adj: &BTreeMap<&'a Vec<String>, Vec<&'a Vec<String>>>,
        state: &mut BTreeMap<&'a Vec<String>, u8>,
        stack: &mut Vec<&'a Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        state.insert(n, 1);
        stack.push(n);
        for &m in adj.get(n).map(Vec::as_slice).unwrap_or(&[]) {
            match state.get(m).copied().unwrap_or(0) {
                1 => {
                    let i = stack.iter().position(|x| *x == m).unwrap();
                    return Some(stack[i..].iter().map(|x| (*x).clone()).collect());
                }
                0 => {
                    if let Some(c) = visit(m, adj, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n, 2);
        None
    }
    let nodes: Vec<&Vec<String>> = adj.keys().copied().collect();
    for n in nodes {
        if state.get(n).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, &adj, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

fn crate_sources() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut v = Vec::new();
    for dir in ["src", "wire/src", "transport/src", "cli/src", "ibverbs/src"] {
        let p = root.join(dir);
        if p.is_dir() {
            v.push(p);
        }
    }
    v
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let mut checked = 0;
    for src in crate_sources() {
        let (mods, e) = edges(&src);
        assert!(mods.len() > 3, "{} has modules", src.display());
        checked += mods.len();
        if let Some(c) = find_cycle(&e) {
            panic!("import cycle between files in {}: {c:?}", src.display());
        }
        let top: Edges = e
            .iter()
            .map(|(a, b)| (a[..a.len().min(1)].to_vec(), b[..b.len().min(1)].to_vec()))
            .filter(|(a, b)| a != b && !a.is_empty() && !b.is_empty())
            .collect();
        if let Some(c) = find_cycle(&top) {
            panic!(
                "import cycle between top-level modules of {}: {c:?}",
                src.display()
            );
        }
    }
    assert!(checked > 40, "only {checked} modules found");
}

#[test]
fn the_link_layer_imports_nothing_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (_, e) = edges(&src);
    let up: Vec<_> = e
        .iter()
        .filter(|(a, b)| {
            a.first().map(String::as_str) == Some("link")
                && b.first().map(String::as_str) != Some("link")
        })
        .collect();
    assert!(up.is_empty(), "the link layer imports {up:?}");
}

#[test]
fn the_checker_sees_cycles() {
    let dir = std::env::temp_dir().join(format!("ferroce-layering-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("b")).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod a; mod b;").unwrap();
    std::fs::write(dir.join("a.rs"), "use crate::b::{x::Thing, self};").unwrap();
    std::fs::write(
        dir.join("b/mod.rs"),
        "mod x; use super::a; // crate::nothing",
    )
    .unwrap();
    std::fs::write(
        dir.join("b/x.rs"),
        "use super::super::a::A; pub struct Thing;",
    )
    .unwrap();
    let (mods, e) = edges(&dir);
    assert_eq!(mods.len(), 4);
    assert!(e.contains(&(vec!["a".into()], vec!["b".into(), "x".into()])));
    assert!(e.contains(&(vec!["b".into(), "x".into()], vec!["a".into()])));
    assert!(find_cycle(&e).is_some());
    std::fs::write(dir.join("b/x.rs"), "pub struct Thing;").unwrap();
    std::fs::write(dir.join("b/mod.rs"), "mod x; // crate::a").unwrap();
    let (_, e) = edges(&dir);
    assert!(find_cycle(&e).is_none(), "{e:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
