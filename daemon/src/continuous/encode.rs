//! A window's encoded form: its protobuf `profd.v1.Window` gzip'd, written a
//! stack at a time so that a window's stacks are never all held at once.
//! Reading it back is in [`super::decode`].
use flate2::{write::GzEncoder, Compression};
use profd_common::api;
use prost::encoding::{encode_key, encode_varint, message, WireType};
use prost::Message;
use std::io::Write;

/// Field numbers of `Window.services` and `ServiceWindow.stacks`.
const SERVICES_FIELD: u32 = 9;
const STACKS_FIELD: u32 = 7;
/// Encoded bytes gathered before they are handed to gzip.
const CHUNK: usize = 256 << 10;

/// A window, encoded: everything but its stacks as a message (its services
/// without stacks), and the whole window gzip'd.
pub struct Encoded {
    pub head: api::Window,
    pub gz: Vec<u8>,
}

/// Writes a window's encoding to gzip piece by piece: the window's own
/// fields, then each service's (with the encoded length of its stacks,
/// known beforehand), then its stacks one by one. The bytes are a
/// `profd.v1.Window` with its fields in another order than prost's, which
/// every decoder accepts.
pub struct Writer {
    gz: GzEncoder<Vec<u8>>,
    buf: Vec<u8>,
    /// Bytes of stacks the current service still expects.
    owed: usize,
}

impl Writer {
    /// Start with `head`'s fields (its services are written with
    /// [`Writer::service`]).
    pub fn new(head: &api::Window) -> Writer {
        let mut buf = Vec::with_capacity(CHUNK + 4096);
        let services = api::Window {
            services: Vec::new(),
            ..head.clone()
        };
        services.encode_raw(&mut buf);
        Writer {
            gz: GzEncoder::new(Vec::new(), Compression::default()),
            buf,
            owed: 0,
        }
    }

    /// The encoded length of `stack` as one of a service's stacks: what
    /// [`Writer::service`] is told for each.
    pub fn stack_len(stack: &api::WindowStack) -> usize {
        message::encoded_len(STACKS_FIELD, stack)
    }

    /// Begin service `s` (its stacks, if any, are written too), whose
    /// further stacks take `stacks_len` bytes ([`Writer::stack_len`] of each).
    pub fn service(&mut self, s: &api::ServiceWindow, stacks_len: usize) -> std::io::Result<()> {
        debug_assert_eq!(
            self.owed, 0,
            "the previous service's stacks were not all written"
        );
        encode_key(SERVICES_FIELD, WireType::LengthDelimited, &mut self.buf);
        encode_varint((s.encoded_len() + stacks_len) as u64, &mut self.buf);
        s.encode_raw(&mut self.buf);
        self.owed = stacks_len;
        self.flush_some()
    }

    /// One more stack of the current service.
    pub fn stack(&mut self, stack: &api::WindowStack) -> std::io::Result<()> {
        let before = self.buf.len();
        message::encode(STACKS_FIELD, stack, &mut self.buf);
        self.owed = self.owed.saturating_sub(self.buf.len() - before);
        self.flush_some()
    }

    fn flush_some(&mut self) -> std::io::Result<()> {
        if self.buf.len() >= CHUNK {
            self.gz.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// The gzip'd window.
    pub fn finish(mut self) -> std::io::Result<Vec<u8>> {
        if self.owed != 0 {
            return Err(std::io::Error::other(format!(
                "a service's stacks are {} bytes short of their announced length",
                self.owed
            )));
        }
        self.gz.write_all(&self.buf)?;
        self.gz.finish()
    }
}

/// Encode a whole window, a stack at a time: each is let go of once
/// written.
pub fn encode(mut w: api::Window) -> std::io::Result<Encoded> {
    let services = std::mem::take(&mut w.services);
    let mut out = Writer::new(&w);
    let mut heads = Vec::with_capacity(services.len());
    for mut service in services {
        let stacks = std::mem::take(&mut service.stacks);
        out.service(&service, stacks.iter().map(Writer::stack_len).sum())?;
        for stack in stacks {
            out.stack(&stack)?;
        }
        heads.push(service);
    }
    w.services = heads;
    Ok(Encoded {
        head: w,
        gz: out.finish()?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::decode::decode;
    use super::*;

    fn stack(tid: u32, function: Vec<u32>, count: u64) -> api::WindowStack {
        api::WindowStack {
            tid,
            line: vec![7; function.len()],
            address: (0..function.len() as u64).map(|a| 0x40_1000 + a).collect(),
            function,
            count,
        }
    }

    fn service(name: &str, stacks: Vec<api::WindowStack>) -> api::ServiceWindow {
        api::ServiceWindow {
            service: name.into(),
            samples: stacks.iter().map(|s| s.count).sum(),
            functions: vec![api::WindowFunction {
                name: "main".into(),
                module: "app".into(),
                ..Default::default()
            }],
            threads: vec![api::WindowThread {
                tid: 10,
                pid: 10,
                name: "app".into(),
                samples: 1,
            }],
            stacks,
            ..Default::default()
        }
    }

    /// Written a stack at a time, a window decodes to itself, whatever its
    /// services, stacks and empty parts; its head is it without stacks.
    #[test]
    fn windows_decode_to_what_was_written() {
        let w = api::Window {
            id: "ab12".into(),
            start_unix_ns: 1,
            end_unix_ns: 2,
            host: "web-1".into(),
            kernel_release: "6.1.0".into(),
            frequency_hz: 19,
            totals: Some(api::Totals {
                attributed: 12,
                lost: 1,
                ..Default::default()
            }),
            services: vec![
                service("app", vec![stack(10, vec![0, 0], 5), stack(11, vec![0], 7)]),
                service("idle", Vec::new()),
            ],
            processes_exited: 3,
            ..Default::default()
        };
        let e = encode(w.clone()).unwrap();
        assert_eq!(decode(&e.gz).unwrap(), w);
        assert!(e.head.services.iter().all(|s| s.stacks.is_empty()));
        assert_eq!(e.head.services[0].samples, 12);
        // Many stacks (a sample each): written in several chunks.
        let many: Vec<_> = (0..20_000).map(|i| stack(i, vec![0; 12], 1)).collect();
        let big = api::Window {
            services: vec![service("app", many)],
            totals: Some(api::Totals {
                attributed: 20_000,
                ..Default::default()
            }),
            ..w
        };
        assert!(big.encoded_len() > 2 * CHUNK, "{} bytes", big.encoded_len());
        assert_eq!(decode(&encode(big.clone()).unwrap().gz).unwrap(), big);
    }

    /// A service whose stacks fall short of their announced length is an
    /// error, not a file that does not decode.
    #[test]
    fn stacks_short_of_their_length_are_refused() {
        let s = stack(1, vec![0], 1);
        let mut out = Writer::new(&api::Window::default());
        out.service(&service("app", Vec::new()), 2 * Writer::stack_len(&s))
            .unwrap();
        out.stack(&s).unwrap();
        let err = out.finish().unwrap_err();
        assert!(err.to_string().contains("short"), "{err}");
    }
}
