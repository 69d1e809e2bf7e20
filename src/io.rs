//! Local file writes in pieces: a leaf every room that writes big buffers to local files uses
//! (the `file://` store, the format's output pieces, the tier cache).

/// Largest single `write` to a local file: one write of a few MiB costs many times the kernel
/// time per byte of 256 KiB writes on the page cache of the VMs measured (bench/README.md,
/// Tier), so big buffers go down in pieces.
pub const WRITE_PIECE: usize = 256 << 10;

/// Writes all of `data` to a local file in [`WRITE_PIECE`]s.
pub fn write_in_pieces(f: &mut impl std::io::Write, data: &[u8]) -> std::io::Result<()> {
    data.chunks(WRITE_PIECE)
        .try_for_each(|piece| f.write_all(piece))
}
