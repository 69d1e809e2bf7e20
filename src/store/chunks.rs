//! Bytes on their way to S3 kept as the pieces they were written in: a part is cut from the
//! front of the queue by reference (splitting at most one piece) and sent as a body of several
//! frames, so an upload never copies its bytes into a part buffer of its own. Before, each open
//! upload kept a part-sized buffer for its whole life (twice an open object's memory).

use aws_sdk_s3::primitives::{ByteStream, SdkBody};
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A queue of byte pieces and their total length.
#[derive(Debug, Default, Clone)]
pub(super) struct Chunks {
    pieces: VecDeque<Bytes>,
    len: usize,
}

impl Chunks {
    pub fn push(&mut self, data: Bytes) {
        if !data.is_empty() {
            self.len += data.len();
            self.pieces.push_back(data);
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first `n` bytes (all of them when fewer are queued), without copying.
    pub fn take(&mut self, n: usize) -> Chunks {
        let mut out = Chunks::default();
        while out.len < n {
            let Some(mut piece) = self.pieces.pop_front() else {
                break;
            };
            let want = n - out.len;
            if piece.len() > want {
                self.pieces.push_front(piece.split_off(want));
            }
            self.len -= piece.len();
            out.push(piece);
        }
        out
    }

    /// Everything queued, leaving the queue empty.
    pub fn take_all(&mut self) -> Chunks {
        std::mem::take(self)
    }

    /// CRC-32C of the bytes, as if they were one buffer.
    pub fn crc32c(&self) -> u32 {
        self.pieces
            .iter()
            .fold(0, |crc, p| crc32c::crc32c_append(crc, p))
    }

    /// The bytes as a request body of known length that the SDK can send again on a retry
    /// (each try reads its own copy of the piece list, not of the bytes).
    pub fn into_body(self) -> ByteStream {
        ByteStream::new(SdkBody::retryable(move || {
            SdkBody::from_body_1_x(Frames(self.clone()))
        }))
    }
}

/// An HTTP body that yields each piece as one frame.
struct Frames(Chunks);

impl Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let c = &mut self.get_mut().0;
        Poll::Ready(c.pieces.pop_front().map(|p| {
            c.len -= p.len();
            Ok(Frame::data(p))
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.0.len as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(sizes: &[usize]) -> (Chunks, Vec<u8>) {
        let mut c = Chunks::default();
        let mut all = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let piece: Vec<u8> = (0..n).map(|j| (i * 31 + j) as u8).collect();
            all.extend_from_slice(&piece);
            c.push(Bytes::from(piece));
        }
        (c, all)
    }

    fn flat(c: &Chunks) -> Vec<u8> {
        c.pieces.iter().flat_map(|p| p.iter().copied()).collect()
    }

    #[test]
    fn parts_are_cut_by_reference_at_any_boundary() {
        let (mut c, all) = queue(&[100, 0, 250, 50, 300]);
        assert_eq!(c.len(), 700);
        let first_piece = c.pieces[0].as_ptr();
        let a = c.take(120);
        assert_eq!((a.len(), c.len()), (120, 580));
        assert_eq!(flat(&a), all[..120]);
        assert_eq!(
            a.pieces[0].as_ptr(),
            first_piece,
            "the piece is shared, not copied"
        );
        let b = c.take(400);
        assert_eq!(flat(&b), all[120..520]);
        let rest = c.take(1000);
        assert_eq!(flat(&rest), all[520..]);
        assert!(c.is_empty() && c.take(5).is_empty());
    }

    #[test]
    fn the_checksum_is_that_of_the_joined_bytes() {
        let (c, all) = queue(&[7, 4096, 1, 65536]);
        assert_eq!(c.crc32c(), crc32c::crc32c(&all));
        assert_eq!(Chunks::default().crc32c(), crc32c::crc32c(b""));
    }

    #[tokio::test]
    async fn the_body_has_its_exact_length_and_can_be_sent_again() {
        let (c, all) = queue(&[10, 20, 30]);
        let body = c.into_body();
        assert_eq!(body.size_hint(), (60, Some(60)));
        let inner = body.into_inner();
        let again = inner.try_clone().expect("a retry can rebuild the body");
        for b in [inner, again] {
            let got = ByteStream::new(b).collect().await.unwrap().into_bytes();
            assert_eq!(got, all);
        }
    }
}
