//! CPython's location table (`co_linetable`, the format of 3.11 and later):
//! which source line an instruction of a code object is on.
//!
//! The table is a run of entries, each covering 1 to 8 code units (2-byte
//! words) of the code. An entry's first byte has its top bit set, a 4-bit
//! code in bits 3-6 and the units covered, minus one, in bits 0-2. The
//! code says what follows: 15 no location; 14 a line delta (signed
//! varint), an end line delta, a column and an end column (varints); 13 a
//! line delta alone; 10-12 a line delta of `code - 10` and two column
//! bytes; 0-9 the same line and one column byte. Varints are 6-bit groups,
//! least significant first, with 0x40 set on every group but the last; a
//! signed varint keeps its sign in its lowest bit.

/// The line of code unit `unit` of a code object whose first line is
/// `first` and whose location table is `table`; None where the table
/// gives the unit no line, or ends before it, or is malformed.
pub fn line_of(table: &[u8], first: u32, unit: usize) -> Option<u32> {
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

    #[test]
    fn a_malformed_or_short_table_gives_no_line() {
        assert_eq!(line_of(&[], 1, 0), None);
        assert_eq!(line_of(&[0x00, 0x00], 1, 0), None);
        // One unit on the first line, then a long form cut short.
        assert_eq!(line_of(&[0x80, 0x00, 0xf0], 7, 0), Some(7));
        assert_eq!(line_of(&[0x80, 0x00, 0xf0], 7, 1), None);
    }
}
