//! Ruby frames named from their iseqs in the process's memory: each iseq
//! read once, kept by address and checked at each read to be the same one
//! (by the body, path and label the sample-time read saw: iseqs are freed
//! by the GC and their addresses reused), and the current line found from
//! the pc in the iseq's instruction table, as `rb_iseq_line_no` finds it.
//! A frame of a method (or of a block in one) is named after the class its
//! method entry's owner is, as Ruby 3.4's labels are (`Work#run`,
//! `Work.setup` for a singleton method, `block in Work#run`): 3.1 keeps a
//! class's name in its instance variable `__classpath__`, and a singleton
//! class's object in `__attached__`, whose ids are learned from `Object`'s.
use super::layout::Layout;
use crate::os::bpf::RawFrame;
use crate::process::interpreted::{field, read, word, Frame};
use crate::process::memory::Memory;
use std::sync::Arc;

/// Bounds on what is read, against memory that changed under the read.
const MAX_STRING: u64 = 4096;
const MAX_TABLE: u64 = 1 << 16;
/// `struct succ_index_table`: the ranks of the first positions, then
/// blocks of 512 positions (a rank, ranks of eight 64-bit words, the words).
const IMMEDIATE_POSITIONS: usize = 54;
const IMMEDIATE_BYTES: usize = 48;
const BLOCK_BYTES: usize = 80;

/// Ruby's `T_STRING` and `T_ARRAY` (`RBasic.flags & 0x1f`) and its flag
/// of a string on the heap, or of an embedded array.
const T_STRING: u64 = 0x05;
const T_ARRAY: u64 = 0x07;
const FL_USER1: u64 = 1 << 13;

/// What names thread `tid`'s Ruby frames, innermost first: in user space,
/// what the sample-time reader copies in the kernel.
#[cfg(test)]
pub fn chain(
    mem: &impl Memory,
    layout: &Layout,
    vm_ptr: u64,
    tid: u32,
) -> Result<Vec<RawFrame>, crate::os::bpf::Status> {
    use crate::os::bpf::Status;
    let w = |addr| word(mem, addr).map_err(|_| Status::Fault);
    let ractor = w(w(vm_ptr)? + layout.vm_main_ractor)?;
    let head = ractor + layout.ractor_threads;
    let mut node = w(head)?;
    let mut ec = None;
    for _ in 0..4096 {
        if node == head || node == 0 {
            break;
        }
        if w(node + layout.thread_tid)? as u32 == tid {
            ec = Some(w(node + layout.thread_ec)?);
            break;
        }
        node = w(node)?;
    }
    let ec = ec.ok_or(Status::NoThread)?;
    let (stack, size, mut cfp) = (w(ec)?, w(ec + 8)?, w(ec + 16)?);
    let end = stack + size * 8 - layout.cfp_bytes;
    let mut out = Vec::new();
    while cfp < end {
        let (pc, iseq) = (w(cfp + layout.cfp_pc)?, w(cfp + layout.cfp_iseq)?);
        let ep = w(cfp + layout.cfp_ep)?;
        let flags = w(ep)?;
        cfp += layout.cfp_bytes;
        if flags & 0x80 != 0 || iseq == 0 || pc == 0 {
            continue;
        }
        let body = w(iseq + layout.iseq_body)?;
        let loc = body + layout.body_pathobj;
        let mut lep = ep;
        let mut lflags = flags;
        for _ in 0..6 {
            if lflags & 2 != 0 {
                break;
            }
            lep = w(lep - 8)? & !3;
            lflags = w(lep)?;
        }
        let cme = match lflags & 2 != 0 {
            true => w(lep - 16)?,
            false => 0,
        };
        out.push(RawFrame {
            code: iseq,
            instr: pc,
            identity: [body, w(loc)?, cme, w(loc + 16)?],
            owner: 0,
            entry: (flags & 0x20 != 0) as u8,
        });
    }
    Ok(out)
}

/// An iseq as read once.
struct Iseq {
    /// Its body's, path's and label's addresses.
    identity: (u64, u64, u64),
    label: Arc<str>,
    base_label: String,
    /// Its names by the method entry of its frames (one, but for a method
    /// defined in several places).
    names: Vec<(u64, Arc<str>)>,
    file: Arc<str>,
    first_line: u32,
    /// Where its instructions are.
    encoded: u64,
    /// The line of each entry of its instruction table.
    lines: Vec<u32>,
    /// Where each entry begins: the positions, or the succinct index.
    starts: Starts,
}

enum Starts {
    Positions(Vec<u32>),
    Succinct(Vec<u8>),
}

/// Iseqs named before, by address, and what names classes.
pub struct Iseqs {
    iseqs: foldhash::HashMap<u64, Iseq>,
    /// Where `rb_cObject` is.
    object: u64,
    /// The ids of `__classpath__` and `__attached__`, once learned (None
    /// when they cannot be: frames are then named by their labels).
    ids: Option<Option<Ids>>,
}

#[derive(Debug, Clone, Copy)]
struct Ids {
    classpath: u64,
    attached: u64,
}

impl Iseqs {
    /// None named yet, in a process whose `rb_cObject` is at `object`.
    pub fn new(object: u64) -> Iseqs {
        Iseqs {
            iseqs: Default::default(),
            object,
            ids: None,
        }
    }

    /// Iseqs held.
    pub fn held(&self) -> usize {
        self.iseqs.len()
    }

    /// The frames `raw`, innermost first, named from their iseqs in `mem`.
    pub fn name(
        &mut self,
        mem: &impl Memory,
        layout: &Layout,
        raw: &[RawFrame],
    ) -> Result<Vec<Frame>, String> {
        if self.ids.is_none() {
            self.ids = Some(ids(mem, layout, self.object));
        }
        raw.iter().map(|f| self.frame(mem, layout, f)).collect()
    }

    fn frame(&mut self, mem: &impl Memory, layout: &Layout, f: &RawFrame) -> Result<Frame, String> {
        let [body, path, cme, label] = f.identity;
        let identity = (body, path, label);
        let known = match self.iseqs.get_mut(&f.code) {
            Some(i) if i.identity == identity => i,
            _ => {
                let read = Iseq::read(mem, layout, f.code, identity)?;
                self.iseqs.insert(f.code, read);
                self.iseqs.get_mut(&f.code).expect("inserted")
            }
        };
        let name = match known.names.iter().find(|(at, _)| *at == cme) {
            Some((_, name)) => name.clone(),
            None => {
                let ids = self.ids.flatten();
                let owner = ids.and_then(|ids| owner(mem, layout, ids, cme));
                let name: Arc<str> = match owner {
                    Some((class, singleton)) => Arc::from(full_label(
                        &known.label,
                        &known.base_label,
                        &class,
                        singleton,
                    )),
                    None => known.label.clone(),
                };
                known.names.push((cme, name.clone()));
                name
            }
        };
        Ok(Frame {
            name,
            file: known.file.clone(),
            first_line: known.first_line,
            line: known.line_at(f.instr),
            entry: f.entry != 0,
        })
    }
}

impl Iseq {
    /// The iseq at `iseq`, which must still have the body, path and label
    /// of `identity`.
    fn read(
        mem: &impl Memory,
        layout: &Layout,
        iseq: u64,
        identity: (u64, u64, u64),
    ) -> Result<Iseq, String> {
        let changed = || format!("the iseq at {iseq:#x} changed since the sample");
        let body = word(mem, iseq + layout.iseq_body)?;
        if body != identity.0 {
            return Err(changed());
        }
        let mut b = vec![0; layout.body_bytes as usize];
        read(mem, body, &mut b)?;
        if (field(&b, layout.body_pathobj), field(&b, layout.body_label))
            != (identity.1, identity.2)
        {
            return Err(changed());
        }
        let size = field(&b, layout.body_insns_size) & 0xffff_ffff;
        let iseq_size = field(&b, 0) >> 32;
        if size > MAX_TABLE || iseq_size > MAX_TABLE {
            return Err(format!(
                "the iseq at {iseq:#x} has a table of an insane size"
            ));
        }
        let mut entries = vec![0; (size * layout.insn_info_bytes) as usize];
        read(mem, field(&b, layout.body_insns), &mut entries)?;
        let lines = (entries.chunks_exact(layout.insn_info_bytes as usize))
            .map(|e| u32::from_le_bytes(e[..4].try_into().expect("4")))
            .collect();
        let positions = field(&b, layout.body_positions);
        let starts = match (positions, size) {
            (_, 0 | 1) => Starts::Positions(Vec::new()),
            (0, _) => {
                let blocks = (iseq_size as usize)
                    .saturating_sub(IMMEDIATE_POSITIONS)
                    .div_ceil(512);
                let mut table = vec![0; IMMEDIATE_BYTES + blocks * BLOCK_BYTES];
                read(mem, field(&b, layout.body_succ_table), &mut table)?;
                Starts::Succinct(table)
            }
            (at, _) => {
                let mut p = vec![0; size as usize * 4];
                read(mem, at, &mut p)?;
                Starts::Positions(
                    (p.chunks_exact(4))
                        .map(|c| u32::from_le_bytes(c.try_into().expect("4")))
                        .collect(),
                )
            }
        };
        let label = string(mem, identity.2)?;
        let base_label = string(mem, field(&b, layout.body_base_label))?;
        Ok(Iseq {
            identity,
            label: Arc::from(label),
            base_label,
            names: Vec::new(),
            file: Arc::from(path(mem, identity.1)?),
            first_line: (field(&b, layout.body_first_line) >> 1) as u32,
            encoded: field(&b, layout.body_encoded),
            lines,
            starts,
        })
    }

    /// The line running at `pc`, 0 when the table gives none.
    fn line_at(&self, pc: u64) -> u32 {
        // The pc points past the instruction running (or at the first).
        let pos = (pc.saturating_sub(self.encoded) / 8).saturating_sub(1) as usize;
        let index = match (&self.starts, self.lines.len()) {
            (_, 0) => return 0,
            (_, 1) => 0,
            (Starts::Positions(p), _) => {
                p.partition_point(|&s| s as usize <= pos).saturating_sub(1)
            }
            (Starts::Succinct(t), _) => succ_rank(t, pos).unwrap_or(1).saturating_sub(1),
        };
        self.lines.get(index).copied().unwrap_or(0)
    }
}

/// `label` with its method's name (`base_label`, its end) qualified by
/// its class: `vm_backtrace.c`'s `rb_profile_frame_full_label`.
fn full_label(label: &str, base_label: &str, class: &str, singleton: bool) -> String {
    let Some(prefix) = label.strip_suffix(base_label) else {
        return label.to_string();
    };
    let separator = if singleton { "." } else { "#" };
    format!("{prefix}{class}{separator}{base_label}")
}

/// The instance variables of class `klass`: (id, value).
fn ivars(mem: &impl Memory, layout: &Layout, klass: u64) -> Result<Vec<(u64, u64)>, String> {
    let ext = word(mem, klass + layout.class_ext)?;
    let table = word(mem, ext + layout.ext_iv_tbl)?;
    if table == 0 {
        return Ok(Vec::new());
    }
    let (start, bound) = (
        word(mem, table + layout.st_start)?,
        word(mem, table + layout.st_bound)?,
    );
    if start > bound || bound - start > 256 {
        return Err(format!("the ivar table at {table:#x} is of an insane size"));
    }
    let mut entries = vec![0; (bound - start) as usize * 24];
    read(
        mem,
        word(mem, table + layout.st_entries)? + start * 24,
        &mut entries,
    )?;
    Ok((entries.chunks_exact(24))
        // A deleted entry's hash is all ones.
        .filter(|e| field(e, 0) != u64::MAX)
        .map(|e| (field(e, 8), field(e, 16)))
        .collect())
}

/// The ids of `__classpath__` and `__attached__`: the variable of `Object`
/// (at `*object`) that is the string "Object", and the variable of its
/// singleton class that is `Object`.
fn ids(mem: &impl Memory, layout: &Layout, object: u64) -> Option<Ids> {
    let object = word(mem, object).ok()?;
    let classpath = (ivars(mem, layout, object).ok()?.into_iter())
        .find(|&(_, v)| string(mem, v).is_ok_and(|s| s == "Object"))?
        .0;
    let meta = word(mem, object + 8).ok()?;
    let attached = (ivars(mem, layout, meta).ok()?.into_iter())
        .find(|&(_, v)| v == object)?
        .0;
    Some(Ids {
        classpath,
        attached,
    })
}

/// Ruby's imemo types of a method entry and of a special variable holder
/// (`(flags >> 12) & 15`), `T_ICLASS`, `T_CLASS`, `T_MODULE` and the flag
/// of a singleton class.
const IMEMO_MENT: u64 = 6;
const IMEMO_SVAR: u64 = 2;
const T_CLASS: u64 = 0x02;
const T_MODULE: u64 = 0x03;
const T_ICLASS: u64 = 0x1c;
const FL_SINGLETON: u64 = 1 << 12;

/// The name of the class or module that method entry `cme` (a frame's
/// `ep[-2]`) is defined in, and whether it is a singleton method (of the
/// class or module named); None when the frame runs in no method, or it
/// cannot be named.
fn owner(mem: &impl Memory, layout: &Layout, ids: Ids, cme: u64) -> Option<(String, bool)> {
    let imemo = |at: u64| {
        let flags = word(mem, at).ok()?;
        (flags & 0x1f == 0x1a).then_some((flags >> 12) & 15)
    };
    let mut cme = cme;
    if cme & 7 != 0 || cme == 0 {
        return None;
    }
    if imemo(cme)? == IMEMO_SVAR {
        cme = word(mem, cme + layout.svar_cref_or_me).ok()?;
    }
    if cme & 7 != 0 || cme == 0 || imemo(cme)? != IMEMO_MENT {
        return None;
    }
    let mut class = word(mem, cme + layout.cme_owner).ok()?;
    let mut flags = word(mem, class).ok()?;
    if flags & 0x1f == T_ICLASS {
        class = word(mem, class + 8).ok()?;
        flags = word(mem, class).ok()?;
    }
    let lookup = |class: u64, id: u64| {
        (ivars(mem, layout, class).ok()?.into_iter()).find_map(|(k, v)| (k == id).then_some(v))
    };
    let singleton = flags & FL_SINGLETON != 0;
    if singleton {
        class = lookup(class, ids.attached)?;
        flags = word(mem, class).ok()?;
    }
    if !matches!(flags & 0x1f, T_CLASS | T_MODULE) {
        return None;
    }
    let path = string(mem, lookup(class, ids.classpath)?).ok()?;
    Some((path, singleton))
}

/// The number of entries that begin at or before `pos`: `iseq.c`'s
/// `succ_index_lookup`.
fn succ_rank(table: &[u8], pos: usize) -> Option<usize> {
    let u64_at = |at: usize| {
        table
            .get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8")))
    };
    if pos < IMMEDIATE_POSITIONS {
        let ranks = u64_at(pos / 9 * 8)?;
        return Some((ranks >> (pos % 9 * 7)) as usize & 0x7f);
    }
    let bit = pos - IMMEDIATE_POSITIONS;
    let block = IMMEDIATE_BYTES + bit / 512 * BLOCK_BYTES;
    let rank = u32::from_le_bytes(table.get(block..block + 4)?.try_into().ok()?) as usize;
    let small = (bit % 512) / 64;
    let small_ranks = u64_at(block + 8)?;
    let small_rank = match small {
        0 => 0,
        i => (small_ranks >> ((i - 1) * 9)) as usize & 0x1ff,
    };
    let bits = u64_at(block + 16 + small * 8)?;
    let ones = (bits << (63 - bit % 64)).count_ones() as usize;
    Some(rank + small_rank + ones)
}

/// The string object at `addr`.
fn string(mem: &impl Memory, addr: u64) -> Result<String, String> {
    let mut head = [0; 32];
    read(mem, addr, &mut head)?;
    let flags = field(&head, 0);
    if flags & 0x1f != T_STRING {
        return Err(format!("the object at {addr:#x} is not a string"));
    }
    let text = match flags & FL_USER1 != 0 {
        true => {
            let len = field(&head, 16);
            if len > MAX_STRING {
                return Err(format!("the string at {addr:#x} is of an insane size"));
            }
            let mut text = vec![0; len as usize];
            read(mem, field(&head, 24), &mut text)?;
            text
        }
        false => {
            let len = (flags >> 14 & 0x1f) as usize;
            let mut text = [0; 24];
            read(mem, addr + 16, &mut text)?;
            text[..len.min(24)].to_vec()
        }
    };
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// An iseq's path object at `addr`: a string, or an array whose first
/// element is the path as given.
fn path(mem: &impl Memory, addr: u64) -> Result<String, String> {
    let flags = word(mem, addr)?;
    if flags & 0x1f != T_ARRAY {
        return string(mem, addr);
    }
    let first = match flags & FL_USER1 != 0 {
        true => word(mem, addr + 16)?,
        false => word(mem, word(mem, addr + 32)?)?,
    };
    string(mem, first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_succinct_index_counts_the_entries_begun() {
        // Entries begin at positions 0, 3 and 10 (immediate ranks, 7 bits
        // each, nine to a word), and at 60 and 600 (in blocks).
        let mut t = vec![0u8; IMMEDIATE_BYTES + 2 * BLOCK_BYTES];
        let rank = |p: usize| [0usize, 3, 10].iter().filter(|&&s| s <= p).count() as u64;
        for word in 0..6 {
            let v: u64 = (0..9).map(|j| rank(word * 9 + j) << (j * 7)).sum();
            t[word * 8..word * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        // Block 0 (positions 54..566): rank 3, a one at bit 6 (position 60).
        t[48..52].copy_from_slice(&3u32.to_le_bytes());
        let small: u64 = (1..8).map(|i| 1u64 << ((i - 1) * 9)).sum();
        t[56..64].copy_from_slice(&small.to_le_bytes());
        t[64..72].copy_from_slice(&(1u64 << 6).to_le_bytes());
        // Block 1 (566..1078): rank 4, a one at bit 34 (position 600).
        t[128..132].copy_from_slice(&4u32.to_le_bytes());
        t[136..144].copy_from_slice(&small.to_le_bytes());
        t[144..152].copy_from_slice(&(1u64 << 34).to_le_bytes());
        let got: Vec<_> = [0, 2, 3, 9, 10, 53, 59, 60, 200, 599, 600, 1000]
            .iter()
            .map(|&p| succ_rank(&t, p).unwrap())
            .collect();
        assert_eq!(got, [1, 1, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5]);
    }
}
