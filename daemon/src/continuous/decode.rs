//! Reading a window back from its gzip'd form as a stream: decompressed a
//! piece at a time and decoded a field (a stack) at a time, and refused as
//! soon as it holds more than a window can, so that a damaged or forged
//! file never makes the daemon hold more than that bound. A query visits a
//! window's stacks one at a time ([`visit_from`]) instead of holding them.
//! Writing is in [`super::encode`].
use profd_common::api;
use prost::encoding::{encode_key, encode_varint, WireType};
use prost::Message;
use std::io::{BufRead, BufReader, Read};

/// Unique stacks the profiler keeps in one window; samples of further new
/// stacks count under `[stack limit reached]`.
pub const WINDOW_STACKS: usize = 500_000;
/// Unique stacks a window holds at most: the profiler's limit, and the
/// stack the samples over it are counted under.
pub const MAX_STACKS: u64 = WINDOW_STACKS as u64 + 1;
/// Room for one stack once decoded: the deepest walk (256 user frames, the
/// unwinder's limit, and 127 kernel frames, perf's default) takes 6 KiB;
/// the rest is for the thread, process and functions (names) it brings.
pub const STACK_BYTES: u64 = 64 << 10;
/// Room for a window's fields beside its stacks' share.
pub const HEAD_BYTES: u64 = 1 << 20;
/// Most bytes any window may hold decoded, whatever its totals say.
pub const MAX_WINDOW_BYTES: u64 = 1 << 30;
/// What a decoded message other than a stack is counted as beyond its
/// encoded bytes (its struct and allocations).
const MESSAGE_BYTES: u64 = 128;
/// Field numbers of `Window.totals`, `Window.services` and
/// `ServiceWindow.stacks`.
const SERVICES_FIELD: u32 = 9;
const STACKS_FIELD: u32 = 7;
/// A scratch buffer larger than this is let go of once used.
const KEEP_SCRATCH: usize = 64 << 10;

/// Why a window cannot be read back: its gzip, its form, or its size.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("not gzip: {0}")]
    Gzip(#[source] std::io::Error),
    /// Not protobuf of a window (what is wrong with it).
    #[error("not a profd.v1.Window: {0}")]
    Form(&'static str),
    #[error("not a profd.v1.Window: field number {0} is not one")]
    FieldNumber(u64),
    #[error("not a profd.v1.Window: {0}")]
    Proto(#[from] prost::DecodeError),
    /// Past the bytes it may hold decoded.
    #[error("holds more than the {0} bytes a window of its samples may hold once decoded")]
    TooBig(u64),
    /// More stacks than its samples (or than [`MAX_STACKS`]).
    #[error("holds more stacks than its {0} samples (or than the {MAX_STACKS} a window may hold)")]
    TooManyStacks(u64),
    #[error("not a window as profd writes it: its field {0} comes after its services")]
    AfterServices(u32),
    #[error("not a window as profd writes it: a service's field {0} comes after its stacks")]
    AfterStacks(u32),
    /// The visitor refused the window's own fields ([`Visit::head`]).
    #[error(transparent)]
    Refused(#[from] Mismatch),
}

/// The most a window whose totals count `attributed` samples may hold
/// decoded: each of its stacks holds one sample at least, so it has at most
/// that many stacks (and never more than [`MAX_STACKS`]).
pub fn bound(attributed: u64) -> u64 {
    HEAD_BYTES
        .saturating_add(attributed.min(MAX_STACKS).saturating_mul(STACK_BYTES))
        .min(MAX_WINDOW_BYTES)
}

/// The window gzip'd in `bytes`.
pub fn decode(bytes: &[u8]) -> Result<api::Window, DecodeError> {
    decode_from(bytes)
}

/// The window gzip'd in what `input` reads (a file, say), read a piece at
/// a time and no further than its bound.
pub fn decode_from(input: impl Read) -> Result<api::Window, DecodeError> {
    Reader::new(input).window(Part::Whole)
}

/// How much of a window a [`Reader`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// All of it.
    Whole,
    /// Its own fields, up to its first service.
    Head,
}

/// A window's own fields, without its services: what `input` holds up to
/// its first service (a window's own fields come first).
pub fn decode_head(input: impl Read) -> Result<api::Window, DecodeError> {
    Reader::new(input).window(Part::Head)
}

/// What a window read a stack at a time is handed to ([`visit_from`]).
pub trait Visit {
    /// The window's own fields (those before its first service, as profd
    /// writes them); false: the rest is not wanted (reading stops there).
    fn head(&mut self, w: &api::Window) -> Result<bool, Mismatch>;
    /// A service's fields before its stacks (its processes, threads and
    /// functions; `stacks` empty): the stacks handed next are its.
    fn service(&mut self, s: api::ServiceWindow);
    /// One stack of the service last handed.
    fn stack(&mut self, s: api::WindowStack);
    /// The service last handed has no more stacks.
    fn service_end(&mut self);
}

/// A visitor that keeps nothing: reading a window with it checks it whole
/// (its form, its bound, its gzip checksum) and holds one stack at a time.
pub struct Check;

impl Visit for Check {
    fn head(&mut self, _: &api::Window) -> Result<bool, Mismatch> {
        Ok(true)
    }
    fn service(&mut self, _: api::ServiceWindow) {}
    fn stack(&mut self, _: api::WindowStack) {}
    fn service_end(&mut self) {}
}

/// The window gzip'd in what `input` reads, handed to `v` a stack at a
/// time: its stacks are never all held. Within the same bound as
/// [`decode_from`]; a window's own fields must come before its services,
/// and a service's before its stacks (as profd writes them), else it is
/// refused. What has been handed before a refusal stays handed.
pub fn visit_from(input: impl Read, v: &mut impl Visit) -> Result<(), DecodeError> {
    Reader::new(input).visit(v)
}

/// The decompressed stream, with the bytes read and the bytes decoded so
/// far held against the bound.
struct Reader<R: Read> {
    r: BufReader<flate2::read::GzDecoder<R>>,
    /// Bytes read from the decompressed stream.
    pos: u64,
    /// Bytes held decoded (an estimate from above), and their limit.
    held: u64,
    limit: u64,
    scratch: Vec<u8>,
}

impl<R: Read> Reader<R> {
    fn new(input: R) -> Reader<R> {
        Reader {
            r: BufReader::with_capacity(64 << 10, flate2::read::GzDecoder::new(input)),
            pos: 0,
            held: 0,
            limit: HEAD_BYTES,
            scratch: Vec::new(),
        }
    }

    fn io(e: std::io::Error) -> DecodeError {
        DecodeError::Gzip(e)
    }

    /// The next byte; None at the end of the stream.
    fn byte(&mut self) -> Result<Option<u8>, DecodeError> {
        let b = match self.r.fill_buf().map_err(Self::io)?.first() {
            Some(&b) => b,
            None => return Ok(None),
        };
        self.r.consume(1);
        self.pos += 1;
        Ok(Some(b))
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self
                .byte()?
                .ok_or(DecodeError::Form("it ends inside a number"))?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError::Form("a number longer than 10 bytes"))
    }

    /// The next field's number and wire type; None at the end.
    fn key(&mut self) -> Result<Option<(u32, WireType)>, DecodeError> {
        let Some(first) = self.byte()? else {
            return Ok(None);
        };
        let key = if first & 0x80 == 0 {
            u64::from(first)
        } else {
            let rest = self.varint()?;
            u64::from(first & 0x7f) | rest.checked_shl(7).unwrap_or(u64::MAX)
        };
        let wire = WireType::try_from(key & 7)?;
        let field = u32::try_from(key >> 3)
            .ok()
            .filter(|&f| f != 0)
            .ok_or(DecodeError::FieldNumber(key >> 3))?;
        Ok(Some((field, wire)))
    }

    /// Refused unless `more` bytes more can be held.
    fn room(&self, more: u64) -> Result<(), DecodeError> {
        if self.held.saturating_add(more) > self.limit {
            return Err(DecodeError::TooBig(self.limit));
        }
        Ok(())
    }

    /// Append the next `len` bytes to `scratch`, once they fit under the
    /// bound.
    fn take(&mut self, len: u64) -> Result<(), DecodeError> {
        self.room(len)?;
        let got = (&mut self.r)
            .take(len)
            .read_to_end(&mut self.scratch)
            .map_err(Self::io)?;
        self.pos += got as u64;
        if got as u64 != len {
            return Err(DecodeError::Form("it ends inside a field"));
        }
        Ok(())
    }

    /// `scratch` := field `field`'s key and value: a message of that one
    /// field, to merge into its message.
    fn field(&mut self, field: u32, wire: WireType) -> Result<(), DecodeError> {
        self.scratch.clear();
        encode_key(field, wire, &mut self.scratch);
        match wire {
            WireType::Varint => {
                let v = self.varint()?;
                encode_varint(v, &mut self.scratch);
            }
            WireType::SixtyFourBit => self.take(8)?,
            WireType::ThirtyTwoBit => self.take(4)?,
            WireType::LengthDelimited => {
                let len = self.varint()?;
                encode_varint(len, &mut self.scratch);
                self.take(len)?;
            }
            WireType::StartGroup | WireType::EndGroup => {
                return Err(DecodeError::Form("it holds a group"));
            }
        }
        Ok(())
    }

    /// Count `bytes` more as held; refused past the bound.
    fn hold(&mut self, bytes: u64) -> Result<(), DecodeError> {
        self.room(bytes)?;
        self.held += bytes;
        if self.scratch.capacity() > KEEP_SCRATCH {
            self.scratch = Vec::new();
        }
        Ok(())
    }

    fn window(mut self, part: Part) -> Result<api::Window, DecodeError> {
        let mut w = api::Window::default();
        let mut services = false;
        let mut stacks = 0u64;
        while let Some((field, wire)) = self.key()? {
            if field == SERVICES_FIELD && wire == WireType::LengthDelimited {
                if part == Part::Head {
                    return Ok(w);
                }
                if !services {
                    services = true;
                    let attributed = w.totals.map_or(0, |t| t.attributed);
                    self.limit = bound(attributed);
                }
                let len = self.varint()?;
                let s = self.service(len, &mut stacks, w.totals.map_or(0, |t| t.attributed))?;
                w.services.push(s);
                continue;
            }
            self.field(field, wire)?;
            w.merge(&self.scratch[..])?;
            self.hold(self.scratch.len() as u64 + MESSAGE_BYTES)?;
        }
        Ok(w)
    }

    /// The window handed to `v`: its own fields, then each service, a
    /// stack at a time. Held against the same bound as [`Self::window`]
    /// (the stacks handed on count as held).
    fn visit(mut self, v: &mut impl Visit) -> Result<(), DecodeError> {
        let mut w = api::Window::default();
        let mut services = false;
        let mut stacks = 0u64;
        while let Some((field, wire)) = self.key()? {
            if field == SERVICES_FIELD && wire == WireType::LengthDelimited {
                if !services {
                    services = true;
                    if !v.head(&w).map_err(DecodeError::Refused)? {
                        return Ok(());
                    }
                    let attributed = w.totals.map_or(0, |t| t.attributed);
                    self.limit = bound(attributed);
                }
                let len = self.varint()?;
                let attributed = w.totals.map_or(0, |t| t.attributed);
                self.service_to(len, &mut stacks, attributed, Some(&mut *v))?;
                continue;
            }
            if services && field < SERVICES_FIELD {
                return Err(DecodeError::AfterServices(field));
            }
            self.field(field, wire)?;
            w.merge(&self.scratch[..])?;
            self.hold(self.scratch.len() as u64 + MESSAGE_BYTES)?;
        }
        if !services {
            v.head(&w).map_err(DecodeError::Refused)?;
        }
        Ok(())
    }

    /// A service of `len` bytes, its stacks decoded one at a time; `stacks`
    /// counts the window's, at most one a sample of `attributed`.
    fn service(
        &mut self,
        len: u64,
        stacks: &mut u64,
        attributed: u64,
    ) -> Result<api::ServiceWindow, DecodeError> {
        self.service_to(len, stacks, attributed, None::<&mut Check>)
    }

    /// [`Self::service`], or with `v` the service handed to it (its fields,
    /// then each stack) and an empty one returned.
    fn service_to(
        &mut self,
        len: u64,
        stacks: &mut u64,
        attributed: u64,
        mut v: Option<&mut impl Visit>,
    ) -> Result<api::ServiceWindow, DecodeError> {
        let end = self.pos.saturating_add(len);
        let mut s = api::ServiceWindow::default();
        let mut handed = false;
        self.hold(MESSAGE_BYTES)?;
        while self.pos < end {
            let (field, wire) = self
                .key()?
                .ok_or(DecodeError::Form("it ends inside a service"))?;
            if field == STACKS_FIELD && wire == WireType::LengthDelimited {
                let n = self.varint()?;
                self.scratch.clear();
                self.take(n)?;
                let stack = api::WindowStack::decode(&self.scratch[..])?;
                *stacks += 1;
                if *stacks > attributed.min(MAX_STACKS) {
                    return Err(DecodeError::TooManyStacks(attributed));
                }
                let size = std::mem::size_of::<api::WindowStack>()
                    + stack.function.capacity() * 4
                    + stack.line.capacity() * 4
                    + stack.address.capacity() * 8;
                self.hold(size as u64)?;
                match v.as_mut() {
                    Some(v) => {
                        if !handed {
                            handed = true;
                            v.service(std::mem::take(&mut s));
                        }
                        v.stack(stack);
                    }
                    None => s.stacks.push(stack),
                }
            } else {
                if handed {
                    return Err(DecodeError::AfterStacks(field));
                }
                self.field(field, wire)?;
                s.merge(&self.scratch[..])?;
                self.hold(self.scratch.len() as u64 + MESSAGE_BYTES)?;
            }
        }
        if self.pos != end {
            return Err(DecodeError::Form("a service runs past its length"));
        }
        if let Some(v) = v {
            if !handed {
                v.service(std::mem::take(&mut s));
            }
            v.service_end();
        }
        Ok(s)
    }
}

/// Err when window `w` is not the one its name (`start`, `end`, `id`)
/// says.
pub(crate) fn mismatch(start: u64, end: u64, id: &str, w: &api::Window) -> Result<(), Mismatch> {
    if (w.start_unix_ns, w.end_unix_ns, w.id.as_str()) == (start, end, id) {
        return Ok(());
    }
    Err(Mismatch {
        named: (id.into(), start, end),
        held: (w.id.clone(), w.start_unix_ns, w.end_unix_ns),
    })
}

/// A window file holds another window than its name says: each as (id,
/// start ns, end ns).
#[derive(Debug, thiserror::Error)]
#[error("its name says window {} from {} to {} ns, but it holds window {} from {} to {} ns", named.0, named.1, named.2, held.0, held.1, held.2)]
pub struct Mismatch {
    named: (String, u64, u64),
    held: (String, u64, u64),
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
