//! Whole-object compression for text and jsonl: a `Write` that compresses as records arrive,
//! and the matching decompression for restore.

use super::{Compression, DecodeError};
use std::borrow::Cow;
use std::io::{self, Read, Write};

/// zstd level 3 is zstd's own default: a good ratio at several hundred MB/s per core.
const ZSTD_LEVEL: i32 = 3;
/// Approximate state a streaming compressor keeps besides its output buffer.
const GZIP_STATE: usize = 300 << 10;
const ZSTD_STATE: usize = 2 << 20;

pub(super) enum Sink {
    Plain(Vec<u8>),
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl Sink {
    pub(super) fn new(c: Compression) -> io::Result<Self> {
        Ok(match c {
            Compression::Gzip => Sink::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::default(),
            )),
            Compression::Zstd => {
                Sink::Zstd(zstd::stream::write::Encoder::new(Vec::new(), ZSTD_LEVEL)?)
            }
            Compression::None | Compression::Snappy => Sink::Plain(Vec::new()),
        })
    }

    /// Memory held: the output buffer's allocation plus compressor state.
    pub(super) fn memory_bytes(&self) -> usize {
        match self {
            Sink::Plain(v) => v.capacity(),
            Sink::Gzip(e) => e.get_ref().capacity() + GZIP_STATE,
            Sink::Zstd(e) => e.get_ref().capacity() + ZSTD_STATE,
        }
    }

    /// Bytes written to the output so far (compressed).
    pub(super) fn output_bytes(&self) -> usize {
        match self {
            Sink::Plain(v) => v.len(),
            Sink::Gzip(e) => e.get_ref().len(),
            Sink::Zstd(e) => e.get_ref().len(),
        }
    }

    pub(super) fn finish(self) -> io::Result<Vec<u8>> {
        match self {
            Sink::Plain(v) => Ok(v),
            Sink::Gzip(e) => e.finish(),
            Sink::Zstd(e) => e.finish(),
        }
    }
}

impl Write for Sink {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Plain(v) => {
                v.extend_from_slice(buf);
                Ok(buf.len())
            }
            Sink::Gzip(e) => e.write(buf),
            Sink::Zstd(e) => e.write(buf),
        }
    }

    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Sink::Plain(v) => {
                v.extend_from_slice(buf);
                Ok(())
            }
            Sink::Gzip(e) => e.write_all(buf),
            Sink::Zstd(e) => e.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Undoes [`Sink`]'s compression; errors say which codec failed.
pub(super) fn decompress(c: Compression, data: &[u8]) -> Result<Cow<'_, [u8]>, DecodeError> {
    let mut out = Vec::new();
    match c {
        Compression::None | Compression::Snappy => return Ok(Cow::Borrowed(data)),
        Compression::Gzip => flate2::read::MultiGzDecoder::new(data)
            .read_to_end(&mut out)
            .map_err(|e| DecodeError::new(None, format!("not valid gzip: {e}")))?,
        Compression::Zstd => zstd::stream::read::Decoder::new(data)
            .and_then(|mut d| d.read_to_end(&mut out))
            .map_err(|e| DecodeError::new(None, format!("not valid zstd: {e}")))?,
    };
    Ok(Cow::Owned(out))
}
