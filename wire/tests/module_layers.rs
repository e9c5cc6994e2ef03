//! The crate's modules form layers: no module reaches, through `crate::`
//! paths, back into a module that reaches it. A cycle here means a concept
//! lost its one home (see the layering in the crate docs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Module name → the modules its code names through `crate::` paths.
type Graph = BTreeMap<String, Vec<String>>;

/// The code of a source file without its comments, so doc links
/// (`[x](crate::X)`) and prose do not count as dependencies.
fn code_of(source: &str) -> String {
    source
        .lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The first path segment after each `crate::` in `code`, including each
/// item of a `crate::{a::x, b}` group.
fn crate_paths(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let preceded_by_ident = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        rest = &rest[at + "crate::".len()..];
        if preceded_by_ident {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => return true,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    false
                })
                .map_or(group.len(), |(i, _)| i);
            let mut depth = 0usize;
            let mut start = 0;
            for (i, c) in group[..end].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(ident_at(group[start..i].trim_start()));
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            out.push(ident_at(group[start..end].trim_start()));
        } else {
            out.push(ident_at(rest));
        }
    }
    out
}

/// Every `.rs` file under `dir` with the top-level module it belongs to
/// (`src/x.rs` and `src/x/**` are module `x`).
fn sources(src: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut dirs = vec![(None::<String>, src.to_path_buf())];
    while let Some((module, dir)) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read the source directory") {
            let path = entry.expect("a directory entry").path();
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .expect("a UTF-8 file name")
                .to_owned();
            let owner = module.clone().unwrap_or_else(|| stem.clone());
            if path.is_dir() {
                dirs.push((Some(owner), path));
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push((owner, path));
            }
        }
    }
    out
}

/// The module graph of the crate's sources; `lib` (the root, which only
/// declares and re-exports) is left out.
fn module_graph(src: &Path) -> Graph {
    let files = sources(src);
    let mut graph: Graph = files
        .iter()
        .filter(|(m, _)| m != "lib")
        .map(|(m, _)| (m.clone(), Vec::new()))
        .collect();
    for (module, path) in &files {
        if module == "lib" {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(path).expect("read a source file"));
        for target in crate_paths(&code) {
            if target != module && graph.contains_key(target) {
                let edges = graph.get_mut(module).expect("every module is a node");
                if !edges.iter().any(|e| e == target) {
                    edges.push(target.to_owned());
                }
            }
        }
    }
    graph
}

/// A cycle of `graph` as the path of modules around it, if there is one.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    let mut marks: BTreeMap<&str, Mark> = BTreeMap::new();
    for start in graph.keys() {
        if marks.contains_key(start.as_str()) {
            continue;
        }
        // Depth-first, with an explicit stack of (module, next edge index).
        let mut stack: Vec<(&str, usize)> = vec![(start, 0)];
        marks.insert(start, Mark::Open);
        while let Some((node, next)) = stack.last().copied() {
            let edges = &graph[node];
            if next == edges.len() {
                marks.insert(node, Mark::Done);
                stack.pop();
                continue;
            }
            if let Some(top) = stack.last_mut() {
                top.1 += 1;
            }
            let to = edges[next].as_str();
            match marks.get(to) {
                Some(Mark::Open) => {
                    let from = stack.iter().position(|(n, _)| *n == to).unwrap_or(0);
                    let mut cycle: Vec<String> =
                        stack[from..].iter().map(|(n, _)| (*n).to_owned()).collect();
                    cycle.push(to.to_owned());
                    return Some(cycle);
                }
                Some(Mark::Done) => {}
                None => {
                    marks.insert(to, Mark::Open);
                    stack.push((to, 0));
                }
            }
        }
    }
    None
}

#[test]
fn the_module_graph_has_no_cycle() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "the modules of agdx-wire form a cycle: {}",
            cycle.join(" -> ")
        );
    }
    // The graph is read at all: the matrix is seen reading the envelope.
    assert!(graph["matrix"].iter().any(|m| m == "envelope"), "{graph:?}");
}

/// The modules `from` reaches, directly or not.
fn reach<'a>(graph: &'a Graph, from: &str) -> Vec<&'a str> {
    let mut seen: Vec<&str> = Vec::new();
    let mut todo: Vec<&str> = graph[from].iter().map(String::as_str).collect();
    while let Some(m) = todo.pop() {
        if !seen.contains(&m) {
            seen.push(m);
            todo.extend(graph[m].iter().map(String::as_str));
        }
    }
    seen
}

#[test]
fn payloads_sit_above_the_validation_vocabulary() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    let below = reach(&graph, "validation");
    for above in ["envelope", "matrix", "payload", "card", "metadata"] {
        assert!(
            !below.contains(&above),
            "the validation vocabulary reaches `{above}`: {below:?}"
        );
    }
    assert!(
        !graph["envelope"].iter().any(|m| m == "matrix"),
        "the envelope must not call into its validity matrix"
    );
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let graph = |edges: &[(&str, &[&str])]| -> Graph {
        edges
            .iter()
            .map(|(m, to)| {
                (
                    (*m).to_owned(),
                    to.iter().map(|t| (*t).to_owned()).collect(),
                )
            })
            .collect()
    };
    let layered = graph(&[("a", &["b", "c"]), ("b", &["c"]), ("c", &[])]);
    assert_eq!(find_cycle(&layered), None);
    let circle = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"])]);
    assert_eq!(
        find_cycle(&circle).map(|c| c.join(" -> ")),
        Some("a -> b -> c -> a".to_owned())
    );
}

#[test]
fn crate_paths_are_read_from_use_lines_and_groups() {
    let code = code_of(
        "use crate::cbor::{Reader, write_map};\n\
         use crate::{envelope::AgentEnvelope, kind};\n\
         fn f() -> $crate::DecodeError { my_crate::x() } // crate::hidden\n",
    );
    assert_eq!(
        crate_paths(&code),
        ["cbor", "envelope", "kind", "DecodeError"]
    );
}
