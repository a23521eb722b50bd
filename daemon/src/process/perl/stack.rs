//! Perl frames named from their CVs in the process's memory, as caller()
//! names them (pp_ctl.c): `Package::sub` from the CV's GV and its stash
//! (`Package::__ANON__` for an anonymous sub), each CV read once, kept by
//! address and checked at each read to be the same one (by the body, start
//! op and GV the sample-time read saw: CVs are freed and their addresses
//! reused); the line is the one the sample-time read took from the frame's
//! cop, and the file the C string its cop names, read once by address (a
//! sub not yet at a statement of its own is at its first line, in its own
//! file). A block run by a loop of its own (a sort block, a regex's code
//! block) is named after the sub it is in; the main program is
//! `main::RUNTIME`, as Devel::NYTProf names it.
use super::layout::Layout;
use crate::os::bpf::RawFrame;
use crate::process::interpreted::{field, read, word, Frame};
use crate::process::memory::Memory;
use std::sync::Arc;

/// Bounds on what is read, against memory that changed under the read.
const MAX_STRING: usize = 4096;
/// `SVt_PVCV`, `SVt_PVGV`, `SVt_PVHV` (`sv_flags & 0x1f`), `SVf_OOK` (a
/// hash with its aux part), `CVf_NAMED` (a CV named by a HEK, not a GV).
const SVT_PVCV: u32 = 13;
const SVT_PVGV: u32 = 9;
const SVT_PVHV: u32 = 12;
const SVF_OOK: u32 = 0x0200_0000;
const CVF_NAMED: u32 = 0x8000;
/// The owner bytes `perl.bpf.h` gives a frame with no CV.
const FRAME_MAIN: u8 = 0xff;

/// The name of the main program's frame.
pub const MAIN: &str = "main::RUNTIME";

fn u32_at(mem: &impl Memory, addr: u64) -> Result<u32, String> {
    let mut b = [0; 4];
    read(mem, addr, &mut b)?;
    Ok(u32::from_le_bytes(b))
}

/// What names thread `tid`'s Perl frames, innermost first: in user space,
/// what `perl.bpf.h` copies in the kernel (process `tgid`).
#[cfg(test)]
pub fn chain(
    mem: &impl Memory,
    c: &crate::os::bpf::PerlConfig,
    tgid: u32,
    tid: u32,
) -> Result<Vec<RawFrame>, crate::os::bpf::Status> {
    use crate::os::bpf::Status;
    let w = |addr| word(mem, addr).map_err(|_| Status::Fault);
    let i32_at = |addr| {
        u32_at(mem, addr)
            .map(|v| v as i32)
            .map_err(|_| Status::Fault)
    };
    if tid != tgid {
        return Err(Status::NoThread);
    }
    let interp = w(c.interp_ptr)?;
    if interp == 0 {
        return Err(Status::NoThread);
    }
    let op = w(interp + c.interp_op)?;
    let mut cop = w(interp + c.interp_curcop)?;
    let phase = i32_at(interp + c.interp_phase)?;
    let mut si = w(interp + c.interp_stackinfo)?;
    let mut out = Vec::new();
    let at = |cop: u64| -> Result<(u64, u64), Status> {
        match cop {
            0 => Ok((0, 0)),
            _ => Ok((
                u64::from(u32_at(mem, cop + c.cop_line).map_err(|_| Status::Fault)?),
                w(cop + c.cop_file)?,
            )),
        }
    };
    let mut first = true;
    loop {
        let (base, prev) = (w(si + c.si_cxstack)?, w(si + c.si_prev)?);
        let (ix, kind) = (i32_at(si + c.si_cxix)?, i32_at(si + c.si_type)?);
        let idle = first && op == 0 && (kind == 3 || kind == 10);
        first = false;
        let mut bottom = None;
        for i in (0..=ix as i64).rev() {
            let cx = base + i as u64 * c.cx_bytes;
            let ty = (w(cx)? & 0xff) as u8;
            if ty & 0xf == 12 {
                continue;
            }
            let oldcop = w(cx + c.cx_oldcop)?;
            bottom = Some((ty & 0xf, oldcop));
            if !matches!(ty & 0xf, 9 | 10) {
                continue;
            }
            let (retop, cv) = (w(cx + c.cx_retop)?, w(cx + c.cx_cv)?);
            let mut entry = retop == 0 || ty & 0x10 != 0;
            if retop == 0 && ty & 0x10 == 0 && i > 0 {
                let below = (w(cx - c.cx_bytes)? & 0xff) as u8;
                entry = !(below & 0xf == 0 || below & 0x80 != 0);
            }
            if !idle && (ty & 0x80 == 0 || entry) {
                let (line, file) = at(if cop == oldcop { 0 } else { cop })?;
                let mut f = RawFrame {
                    instr: line,
                    entry: entry as u8,
                    owner: 0xfe,
                    identity: [0, 0, 0, file],
                    ..RawFrame::default()
                };
                if ty & 0x80 == 0 {
                    let body = w(cv)?;
                    f.code = cv;
                    f.owner = ty & 0xf;
                    f.identity = [body, w(body + c.cv_start)?, w(body + c.cv_gv)?, file];
                }
                out.push(f);
            }
            cop = oldcop;
        }
        if kind == 1 || prev == 0 {
            break;
        }
        if !idle && kind == 3 && bottom.is_some_and(|(t, _)| t == 0) {
            let (line, file) = at(cop)?;
            out.push(RawFrame {
                instr: line,
                identity: [0, 0, 0, file],
                owner: 0xfe,
                entry: 1,
                ..RawFrame::default()
            });
        }
        if let Some((_, oldcop)) = bottom {
            cop = oldcop;
        }
        si = prev;
    }
    if phase == 4 {
        let (line, file) = at(cop)?;
        out.push(RawFrame {
            instr: line,
            identity: [0, 0, 0, file],
            owner: FRAME_MAIN,
            entry: 1,
            ..RawFrame::default()
        });
    }
    Ok(out)
}

/// A CV as read once.
struct Cv {
    /// Its body's, start op's and GV's addresses.
    identity: [u64; 3],
    name: Arc<str>,
    /// The file it was defined in, and its first line.
    file: Arc<str>,
    first_line: u32,
}

/// CVs named before, by address, and file names read, by address.
#[derive(Default)]
pub struct Cvs {
    cvs: foldhash::HashMap<u64, Cv>,
    files: foldhash::HashMap<u64, Arc<str>>,
}

impl Cvs {
    /// CVs and file names held.
    pub fn held(&self) -> usize {
        self.cvs.len() + self.files.len()
    }

    /// The file name at `addr`.
    fn file(&mut self, mem: &impl Memory, addr: u64) -> Result<Arc<str>, String> {
        if addr == 0 {
            return Ok(Arc::from(""));
        }
        if let Some(file) = self.files.get(&addr) {
            return Ok(file.clone());
        }
        let file: Arc<str> = Arc::from(c_string(mem, addr)?);
        self.files.insert(addr, file.clone());
        Ok(file)
    }

    /// The frames `raw`, innermost first, named from their CVs and cops in
    /// `mem`.
    pub fn name(
        &mut self,
        mem: &impl Memory,
        layout: &Layout,
        raw: &[RawFrame],
    ) -> Result<Vec<Frame>, String> {
        let mut frames: Vec<Frame> = Vec::with_capacity(raw.len());
        // Blocks take the name of the sub they are in: the next frame out.
        let mut blocks = Vec::new();
        for f in raw {
            let (mut line, mut file) = (f.instr as u32, self.file(mem, f.identity[3])?);
            let (name, first_line) = match (f.code, f.owner) {
                (0, FRAME_MAIN) => (Arc::from(MAIN), 0),
                (0, _) => {
                    blocks.push(frames.len());
                    (Arc::from(""), 0)
                }
                (cv, _) => {
                    let identity = [f.identity[0], f.identity[1], f.identity[2]];
                    let known = match self.cvs.get(&cv) {
                        Some(known) if known.identity == identity => known,
                        _ => {
                            let read = Cv::read(mem, layout, cv, identity)?;
                            self.cvs.insert(cv, read);
                            self.cvs.get(&cv).expect("inserted")
                        }
                    };
                    // Not at a statement of its own yet: at its first.
                    if f.identity[3] == 0 {
                        (line, file) = (known.first_line, known.file.clone());
                    }
                    (known.name.clone(), known.first_line)
                }
            };
            frames.push(Frame {
                name,
                file,
                first_line,
                line,
                entry: f.entry != 0,
            });
        }
        for &i in blocks.iter().rev() {
            let outer = frames
                .get(i + 1)
                .map_or(Arc::from(MAIN), |f| f.name.clone());
            frames[i].name = outer;
        }
        Ok(frames)
    }
}

impl Cv {
    /// The CV at `cv`, which must still have the body, start op and GV of
    /// `identity`.
    fn read(mem: &impl Memory, layout: &Layout, cv: u64, identity: [u64; 3]) -> Result<Cv, String> {
        let changed = || format!("the CV at {cv:#x} changed since the sample");
        let flags = u32_at(mem, cv + layout.sv_flags)?;
        if flags & 0x1f != SVT_PVCV || word(mem, cv)? != identity[0] {
            return Err(changed());
        }
        let mut body = vec![0; (layout.cv_flags + 8) as usize];
        read(mem, identity[0], &mut body)?;
        let gv = field(&body, layout.cv_gv);
        if [field(&body, layout.cv_start), gv] != identity[1..] {
            return Err(changed());
        }
        let cv_flags = field(&body, layout.cv_flags) as u32;
        let (stash, sub) = match cv_flags & CVF_NAMED != 0 {
            // A lexical sub: its name is a HEK, its package the CV's stash.
            true => (field(&body, layout.cv_stash), hek(mem, layout, gv)?),
            false => {
                if u32_at(mem, gv + layout.sv_flags)? & 0x1f != SVT_PVGV {
                    return Err(format!("the GV of the CV at {cv:#x} is not a glob"));
                }
                let gv_body = word(mem, gv)?;
                (
                    word(mem, gv_body + layout.gv_stash)?,
                    hek(mem, layout, word(mem, gv_body + layout.gv_name)?)?,
                )
            }
        };
        let package = stash_name(mem, layout, stash).unwrap_or_else(|_| "__UNKNOWN__".into());
        let file = match field(&body, layout.cv_file) {
            0 => String::new(),
            at => c_string(mem, at)?,
        };
        Ok(Cv {
            identity,
            name: Arc::from(format!("{package}::{sub}")),
            file: Arc::from(file),
            first_line: first_line(mem, layout, identity[1]).unwrap_or(0),
        })
    }
}

/// The line of the sub whose first op is `start`: its first statement's
/// (a `nextstate` cop), 0 when it does not begin with one.
fn first_line(mem: &impl Memory, layout: &Layout, start: u64) -> Result<u32, String> {
    if start == 0 {
        return Ok(0);
    }
    let ty = (u32_at(mem, start + layout.op_type)? & 0x1ff) as u16;
    if ty != layout.op_nextstate && ty != layout.op_dbstate {
        return Ok(0);
    }
    u32_at(mem, start + layout.cop_line)
}

/// The name of the stash (a package's symbol table) at `hv`.
fn stash_name(mem: &impl Memory, layout: &Layout, hv: u64) -> Result<String, String> {
    let flags = u32_at(mem, hv + layout.sv_flags)?;
    if flags & 0x1f != SVT_PVHV || flags & SVF_OOK == 0 {
        return Err(format!("the stash at {hv:#x} has no name"));
    }
    let aux = word(mem, hv)? + layout.hv_aux;
    let name = word(mem, aux + layout.aux_name)?;
    let count = u32_at(mem, aux + layout.aux_name_count)?;
    // With several names, the first of the array is the stash's own.
    let name = match count {
        0 => name,
        _ => word(mem, name)?,
    };
    hek(mem, layout, name)
}

/// The text of the hash key (HEK) at `addr`.
fn hek(mem: &impl Memory, layout: &Layout, addr: u64) -> Result<String, String> {
    if addr == 0 {
        return Err("a name is missing".into());
    }
    let len = u32_at(mem, addr + layout.hek_len)? as usize;
    if len > MAX_STRING {
        return Err(format!("the name at {addr:#x} is of an insane size"));
    }
    let mut text = vec![0; len];
    read(mem, addr + layout.hek_key, &mut text)?;
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// The C string at `addr`, read a page's part at a time.
fn c_string(mem: &impl Memory, addr: u64) -> Result<String, String> {
    let mut text = Vec::new();
    let mut at = addr;
    while text.len() < MAX_STRING {
        let chunk = (4096 - (at % 4096) as usize).min(256);
        let mut buf = vec![0; chunk];
        read(mem, at, &mut buf)?;
        if let Some(end) = buf.iter().position(|&b| b == 0) {
            text.extend_from_slice(&buf[..end]);
            return Ok(String::from_utf8_lossy(&text).into_owned());
        }
        text.extend_from_slice(&buf);
        at += chunk as u64;
    }
    Err(format!("the string at {addr:#x} is of an insane size"))
}
