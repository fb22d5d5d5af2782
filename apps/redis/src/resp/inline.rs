//! Splitting an inline command line into arguments, as Redis's `sdssplitargs` does: words
//! separated by blanks, `"double quotes"` with `\n \r \t \b \a \xHH` escapes, `'single
//! quotes'` with `\'`. A closing quote must be followed by a blank or the end of the line.
//! The line is a C string there, so a NUL byte ends it.

use alloc::vec::Vec;

/// C's `isspace` in the "C" locale.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// The arguments of `line`, or `None` for unbalanced quotes (or a closing quote followed by
/// something other than a blank).
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    // A NUL ends the C string.
    let line = match line.iter().position(|&c| c == 0) {
        Some(end) => &line[..end],
        None => line,
    };
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    let mut args = Vec::new();
    let mut p = 0;
    loop {
        while p < line.len() && is_space(line[p]) {
            p += 1;
        }
        if p >= line.len() {
            return Some(args);
        }
        let mut current = Vec::new();
        let (mut in_double, mut in_single) = (false, false);
        loop {
            let c = at(p);
            if in_double {
                if c == b'\\'
                    && at(p + 1) == b'x'
                    && let (Some(h), Some(l)) = (hex(at(p + 2)), hex(at(p + 3)))
                {
                    current.push(h * 16 + l);
                    p += 4;
                    continue;
                }
                if c == b'\\' && at(p + 1) != 0 {
                    p += 1;
                    current.push(match at(p) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                } else if c == b'"' {
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return None;
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return None;
                } else {
                    current.push(c);
                }
            } else if in_single {
                if c == b'\\' && at(p + 1) == b'\'' {
                    p += 1;
                    current.push(b'\'');
                } else if c == b'\'' {
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return None;
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return None;
                } else {
                    current.push(c);
                }
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => {
                        if c != 0 {
                            p += 1;
                        }
                        break;
                    }
                    b'"' => in_double = true,
                    b'\'' => in_single = true,
                    _ => current.push(c),
                }
            }
            p += 1;
        }
        args.push(current);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn split(s: &[u8]) -> Option<Vec<Vec<u8>>> {
        split_args(s)
    }

    #[test]
    fn words_and_quotes() {
        assert_eq!(split(b"PING"), Some(vec![b"PING".to_vec()]));
        assert_eq!(
            split(b"  set  a   b "),
            Some(vec![b"set".to_vec(), b"a".to_vec(), b"b".to_vec()])
        );
        assert_eq!(split(b""), Some(vec![]));
        assert_eq!(split(b"   "), Some(vec![]));
        assert_eq!(
            split(b"set k \"a b\\n\\x41\\x4\" 'it\\'s'"),
            Some(vec![
                b"set".to_vec(),
                b"k".to_vec(),
                b"a b\nAx4".to_vec(),
                b"it's".to_vec()
            ])
        );
        assert_eq!(split(b"\"\""), Some(vec![Vec::new()]));
        assert_eq!(split(b"a\0b c"), Some(vec![b"a".to_vec()]));
    }

    #[test]
    fn unbalanced_quotes() {
        assert_eq!(split(b"\"abc"), None);
        assert_eq!(split(b"'abc"), None);
        assert_eq!(split(b"\"abc\"def"), None);
        assert_eq!(split(b"'abc'def"), None);
        assert_eq!(split(b"\"abc\\"), None);
    }
}
