//! A `std::io::Write` that hands what is written out in pieces of a given
//! size as it comes, so that an export written into it is never whole.
use std::io::{self, Write};

/// Bytes written, handed to `each` in pieces of exactly `piece_bytes` (the
/// last one, given by [`PieceWriter::finish`], shorter). When `each`
/// returns false (the reader is gone) every later write fails, which stops
/// the export writing.
pub(crate) struct PieceWriter<F> {
    piece: Vec<u8>,
    piece_bytes: usize,
    written: u64,
    stopped: bool,
    each: F,
}

impl<F: FnMut(Vec<u8>) -> bool> PieceWriter<F> {
    pub(crate) fn new(piece_bytes: usize, each: F) -> Self {
        let piece_bytes = piece_bytes.max(1);
        PieceWriter {
            piece: Vec::with_capacity(Self::capacity(piece_bytes)),
            piece_bytes,
            written: 0,
            stopped: false,
            each,
        }
    }

    /// A piece's capacity: none for one unbounded piece (it grows).
    fn capacity(piece_bytes: usize) -> usize {
        if piece_bytes == usize::MAX {
            0
        } else {
            piece_bytes
        }
    }

    /// Whether `each` has stopped the writing.
    pub(crate) fn stopped(&self) -> bool {
        self.stopped
    }

    /// Bytes written so far.
    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    /// Hands out what is left: the last piece, or with unbounded pieces
    /// the one piece, even empty.
    pub(crate) fn finish(mut self) {
        if !self.stopped && (!self.piece.is_empty() || self.piece_bytes == usize::MAX) {
            (self.each)(self.piece);
        }
    }
}

impl<F: FnMut(Vec<u8>) -> bool> Write for PieceWriter<F> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.stopped {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the export's reader is gone",
            ));
        }
        let mut rest = data;
        while !rest.is_empty() {
            let n = (self.piece_bytes - self.piece.len()).min(rest.len());
            self.piece.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            if self.piece.len() == self.piece_bytes {
                let next = Vec::with_capacity(Self::capacity(self.piece_bytes));
                if !(self.each)(std::mem::replace(&mut self.piece, next)) {
                    self.stopped = true;
                    break;
                }
            }
        }
        self.written += (data.len() - rest.len()) as u64;
        Ok(data.len() - rest.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_exact_and_make_the_bytes() {
        let data: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        for size in [1, 7, 100, 999, 1000, 4096] {
            let mut pieces = Vec::new();
            let mut w = PieceWriter::new(size, |p| {
                pieces.push(p);
                true
            });
            for chunk in data.chunks(13) {
                w.write_all(chunk).unwrap();
            }
            assert_eq!(w.written(), 1000);
            w.finish();
            let (last, whole) = pieces.split_last().unwrap();
            assert!(whole.iter().all(|p| p.len() == size), "size {size}");
            assert!(!last.is_empty() && last.len() <= size, "size {size}");
            assert_eq!(pieces.concat(), data, "pieces of {size} bytes");
        }
    }

    #[test]
    fn a_stopped_reader_stops_the_writing() {
        let mut n = 0;
        let mut w = PieceWriter::new(10, |_| {
            n += 1;
            false
        });
        assert!(w.write_all(&[0; 25]).is_err());
        assert!(w.stopped());
        assert!(w.write_all(&[0; 5]).is_err());
        w.finish();
        assert_eq!(n, 1, "nothing handed out after the stop");
    }

    #[test]
    fn unbounded_pieces_are_one() {
        let mut pieces = Vec::new();
        let mut w = PieceWriter::new(usize::MAX, |p| {
            pieces.push(p);
            true
        });
        w.write_all(b"abc").unwrap();
        w.write_all(b"def").unwrap();
        w.finish();
        assert_eq!(pieces, vec![b"abcdef".to_vec()]);
    }
}
