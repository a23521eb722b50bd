//! Which source line an instruction of a code object is on, from the
//! code object's line table in each version's format: the location table
//! (`co_linetable` of 3.11 and later), 3.10's `co_linetable`, and the
//! `co_lnotab` of 3.8 and 3.9.
//!
//! The location table is a run of entries, each covering 1 to 8 code units (2-byte
//! words) of the code. An entry's first byte has its top bit set, a 4-bit
//! code in bits 3-6 and the units covered, minus one, in bits 0-2. The
//! code says what follows: 15 no location; 14 a line delta (signed
//! varint), an end line delta, a column and an end column (varints); 13 a
//! line delta alone; 10-12 a line delta of `code - 10` and two column
//! bytes; 0-9 the same line and one column byte. Varints are 6-bit groups,
//! least significant first, with 0x40 set on every group but the last; a
//! signed varint keeps its sign in its lowest bit.
use super::layout::Lines;

/// The line of the instruction at byte `offset` of a code object whose
/// first line is `first` and whose line table, in format `lines`, is
/// `table`; None where the table gives it no line.
pub fn line(lines: Lines, table: &[u8], first: u32, offset: usize) -> Option<u32> {
    match lines {
        Lines::Locations => line_of(table, first, offset / 2),
        Lines::Linetable => linetable_line(table, first, offset),
        Lines::Lnotab => lnotab_line(table, first, offset),
    }
}

/// 3.10's table: pairs of a byte delta (unsigned) and a line delta
/// (signed; -128 for code with no line), each pair the range of code
/// after the last; the line is the sum of the deltas so far.
fn linetable_line(table: &[u8], first: u32, offset: usize) -> Option<u32> {
    let mut line = i64::from(first);
    let mut end = 0usize;
    for pair in table.chunks_exact(2) {
        let start = end;
        end += usize::from(pair[0]);
        let here = match pair[1] as i8 {
            -128 => None,
            delta => {
                line += i64::from(delta);
                Some(line)
            }
        };
        if (start..end).contains(&offset) {
            return here.and_then(|l| u32::try_from(l).ok());
        }
    }
    None
}

/// The `co_lnotab` of 3.8 and 3.9: pairs of a byte delta (unsigned) and a
/// line delta (signed), each the start of a line; an instruction is on the
/// line of the last start at or before it.
fn lnotab_line(table: &[u8], first: u32, offset: usize) -> Option<u32> {
    let mut line = i64::from(first);
    let mut at = 0usize;
    for pair in table.chunks_exact(2) {
        at += usize::from(pair[0]);
        if at > offset {
            break;
        }
        line += i64::from(pair[1] as i8);
    }
    u32::try_from(line).ok()
}

/// The line of code unit `unit` of a code object whose first line is
/// `first` and whose location table is `table`; None where the table
/// gives the unit no line, or ends before it, or is malformed.
fn line_of(table: &[u8], first: u32, unit: usize) -> Option<u32> {
    let mut line = i64::from(first);
    let mut covered = 0usize;
    let mut at = 0usize;
    while let Some(&head) = table.get(at) {
        at += 1;
        if head & 0x80 == 0 {
            return None;
        }
        let code = (head >> 3) & 15;
        let units = usize::from(head & 7) + 1;
        let here = match code {
            15 => None,
            14 => {
                line += signed(table, &mut at)?;
                for _ in 0..3 {
                    varint(table, &mut at)?;
                }
                Some(line)
            }
            13 => {
                line += signed(table, &mut at)?;
                Some(line)
            }
            10..=12 => {
                line += i64::from(code - 10);
                at += 2;
                Some(line)
            }
            _ => {
                at += 1;
                Some(line)
            }
        };
        if unit < covered + units {
            return here.and_then(|l| u32::try_from(l).ok());
        }
        covered += units;
    }
    None
}

fn varint(table: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    let mut shift = 0;
    loop {
        let byte = *table.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x3f) << shift;
        if byte & 0x40 == 0 {
            return Some(value);
        }
        shift += 6;
        if shift > 60 {
            return None;
        }
    }
}

fn signed(table: &[u8], at: &mut usize) -> Option<i64> {
    let v = varint(table, at)?;
    let magnitude = (v >> 1) as i64;
    Some(if v & 1 == 1 { -magnitude } else { magnitude })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Each code unit's line as the real interpreter gives it
    /// (`co_positions()`), for every function of a module of varied
    /// shapes (long jumps back, lines far apart, comprehensions, no-line
    /// code), against the decoding of its `co_linetable`.
    #[test]
    fn lines_are_those_the_interpreter_gives() {
        let script = r#"
import types
src = '''
def simple(x):
    y = x + 1
    if y > 3:
        return [i for i in range(y)]
    return None

def far(a):
    b = a



''' + "\n" * 300 + '''
    for i in range(a):
        b += i * (a
                  + 1)
    try:
        return b // a
    except ZeroDivisionError:
        return -1

class K:
    def method(self):
        return (lambda q: q * 2)(3)
'''
def walk(code):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from walk(c)
for code in walk(compile(src, "m.py", "exec")):
    lines = ",".join("-" if p[0] is None else str(p[0]) for p in code.co_positions())
    print(code.co_firstlineno, code.co_linetable.hex(), lines)
"#;
        let out = Command::new("/usr/bin/python3")
            .args(["-c", script])
            .output()
            .expect("python3");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let mut codes = 0;
        let mut far = false;
        for row in text.lines() {
            let mut parts = row.split(' ');
            let first: u32 = parts.next().unwrap().parse().unwrap();
            let hex = parts.next().unwrap();
            let table: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            for (unit, want) in parts.next().unwrap().split(',').enumerate() {
                let want = want.parse::<u32>().ok();
                assert_eq!(line_of(&table, first, unit), want, "{row}: unit {unit}");
                far |= want.is_some_and(|l| l > 300);
            }
            codes += 1;
        }
        assert!(codes >= 5 && far, "{text}");
    }

    /// Where the tables of older interpreters are kept, with each byte
    /// offset's line as the interpreter gives it.
    fn tables() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/process/python/images")
    }

    /// The script `make_tables` runs: every code object's first line,
    /// table, and the line of each even byte offset of its code, as the
    /// interpreter itself gives them (`co_lines()` in 3.10,
    /// `dis.findlinestarts` before).
    const TABLES: &str = r#"
import dis, sys, types
src = '''
def simple(x):
    y = x + 1
    if y > 3:
        return [i for i in range(y)]
    return None

def far(a):
    b = a
''' + "\n" * 300 + '''
    for i in range(a):
        b += i * (a
                  + 1)
    try:
        return b // a
    except ZeroDivisionError:
        return -1
''' + "\n".join("    x%d = %d" % (i, i) for i in range(200)) + '''

class K:
    def method(self):
        return (lambda q: q * 2)(3)
'''
def walk(code):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from walk(c)
for code in walk(compile(src, "m.py", "exec")):
    n = len(code.co_code)
    at = [None] * n
    if sys.version_info >= (3, 10):
        table = code.co_linetable
        for start, end, line in code.co_lines():
            for i in range(start, end):
                at[i] = line
    else:
        table = code.co_lnotab
        starts = list(dis.findlinestarts(code))
        for i in range(n):
            at[i] = ([l for o, l in starts if o <= i] or [code.co_firstlineno])[-1]
    lines = ",".join("-" if at[i] is None else str(at[i]) for i in range(0, n, 2))
    print(code.co_firstlineno, table.hex(), lines)
"#;

    /// The tables of real CPython 3.8, 3.9 and 3.10 (pyenv builds, kept by
    /// `make_tables`) decode to the lines the interpreters gave.
    #[test]
    fn older_tables_give_the_interpreters_lines() {
        for (minor, lines) in [
            (8, Lines::Lnotab),
            (9, Lines::Lnotab),
            (10, Lines::Linetable),
        ] {
            let text = std::fs::read_to_string(tables().join(format!("lines-3.{minor}.txt")))
                .expect("the tables");
            let mut far = false;
            for row in text.lines() {
                let mut parts = row.split(' ');
                let first: u32 = parts.next().unwrap().parse().unwrap();
                let hex = parts.next().unwrap();
                let table: Vec<u8> = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                    .collect();
                for (i, want) in parts.next().unwrap().split(',').enumerate() {
                    let want = want.parse::<u32>().ok();
                    let got = line(lines, &table, first, 2 * i);
                    assert_eq!(got, want, "3.{minor} {row}: offset {}", 2 * i);
                    far |= want.is_some_and(|l| l > 300);
                }
            }
            assert!(text.lines().count() >= 5 && far, "3.{minor}: {text}");
        }
    }

    /// Remakes the tables from the pyenv interpreters (not a check: run it
    /// by name with `--ignored`).
    #[test]
    #[ignore]
    fn make_tables() {
        for (minor, version) in [(8, "3.8.18"), (9, "3.9.18"), (10, "3.10.13")] {
            let out = Command::new(format!("/root/.pyenv/versions/{version}/bin/python3"))
                .args(["-c", TABLES])
                .output()
                .expect("python3");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::fs::write(tables().join(format!("lines-3.{minor}.txt")), out.stdout).unwrap();
        }
    }

    #[test]
    fn a_malformed_or_short_table_gives_no_line() {
        assert_eq!(line_of(&[], 1, 0), None);
        assert_eq!(line_of(&[0x00, 0x00], 1, 0), None);
        // One unit on the first line, then a long form cut short.
        assert_eq!(line_of(&[0x80, 0x00, 0xf0], 7, 0), Some(7));
        assert_eq!(line_of(&[0x80, 0x00, 0xf0], 7, 1), None);
    }
}
