//! The JSON documents the gateway returns (written by hand: the crate has no serializer).

use super::service::{FunctionInfo, ProcessInfo};
use alloc::string::String;
use core::fmt::Write;

/// Appends `s` as a JSON string literal (quotes, backslashes and control characters escaped).
pub fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `GET /functions`: `[{"name":"…","size":N,"generation":G,"groundhog":"restore"},…]`
/// followed by a newline.
pub fn function_list(functions: &[FunctionInfo]) -> String {
    let mut out = String::from("[");
    for (i, f) in functions.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"name\":");
        write_string(&mut out, f.name.as_str());
        let _ = write!(
            out,
            ",\"size\":{},\"generation\":{},\"groundhog\":\"{}\"}}",
            f.size, f.generation, f.groundhog
        );
    }
    out.push_str("]\n");
    out
}

/// `POST /processes/<program>`: `{"pid":N}` and a newline.
pub fn started(pid: u64) -> String {
    alloc::format!("{{\"pid\":{pid}}}\n")
}

/// `GET /processes`: `[{"pid":N,"ppid":N,"program":"…","state":"…","area":"0x…",
/// "area_bytes":N,"memory_bytes":N},…]` and a newline.
pub fn process_list(processes: &[ProcessInfo]) -> String {
    let mut out = String::from("[");
    for (i, p) in processes.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{{\"pid\":{},\"ppid\":{},\"program\":", p.pid, p.ppid);
        write_string(&mut out, &p.program);
        let _ = write!(
            out,
            ",\"state\":\"{}\",\"area\":\"{:#x}\",\"area_bytes\":{},\"memory_bytes\":{}}}",
            p.state, p.area, p.area_bytes, p.memory_bytes
        );
    }
    out.push_str("]\n");
    out
}

/// `POST /processes/<pid>/checkpoint`: `{"checkpoint":"S.E","pages":N}` and a newline.
pub fn checkpoint_written(w: &super::checkpoints::Written) -> String {
    alloc::format!("{{\"checkpoint\":\"{}\",\"pages\":{}}}\n", w.id, w.pages)
}

/// `GET /checkpoints`: `[{"id":"S.E","name":"…","kind":"…","pages":N,"writer":N,"clones":N},…]`
/// and a newline.
pub fn checkpoint_list(list: &[super::checkpoints::CheckpointInfo]) -> String {
    let mut out = String::from("[");
    for (i, c) in list.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{{\"id\":\"{}\",\"name\":", c.id);
        write_string(&mut out, &c.name);
        let _ = write!(
            out,
            ",\"kind\":\"{}\",\"pages\":{},\"writer\":{},\"clones\":{}}}",
            c.kind, c.pages, c.writer, c.clones
        );
    }
    out.push_str("]\n");
    out
}

/// The body of a successful deployment: `{"name":"…","generation":G,"replaced":bool}`.
pub fn deployed(name: &str, generation: u64, replaced: bool) -> String {
    let mut out = String::from("{\"name\":");
    write_string(&mut out, name);
    let _ = writeln!(
        out,
        ",\"generation\":{generation},\"replaced\":{replaced}}}"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FunctionName;

    #[test]
    fn empty_list_is_an_empty_array() {
        assert_eq!(function_list(&[]), "[]\n");
    }

    #[test]
    fn list_has_name_size_generation() {
        let f = |n: &str, size, generation| FunctionInfo {
            name: FunctionName::new(n).unwrap(),
            size,
            generation,
            groundhog: if size > 100 {
                crate::module::GroundhogMode::Fresh
            } else {
                crate::module::GroundhogMode::Restore
            },
        };
        assert_eq!(
            function_list(&[f("a", 10, 1), f("b-2", 2048, 7)]),
            "[{\"name\":\"a\",\"size\":10,\"generation\":1,\"groundhog\":\"restore\"},{\"name\":\"b-2\",\"size\":2048,\"generation\":7,\"groundhog\":\"fresh\"}]\n"
        );
    }

    #[test]
    fn strings_are_escaped() {
        let mut s = String::new();
        write_string(&mut s, "a\"b\\c\n\u{1}");
        assert_eq!(s, "\"a\\\"b\\\\c\\n\\u0001\"");
        assert_eq!(
            deployed("hello", 3, false),
            "{\"name\":\"hello\",\"generation\":3,\"replaced\":false}\n"
        );
    }
}
