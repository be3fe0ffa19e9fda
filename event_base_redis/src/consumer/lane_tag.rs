//! The lane tags of a receipt: set in its `lo` (an entry id's sequence, far below them), they
//! tell which of a consumer's lanes (work, broadcast, keyed) an entry came from.

/// Set in a receipt's `lo` (the entry id's sequence, far below it) for an entry of a
/// broadcast lane.
pub(super) const BROADCAST_TAG: u64 = 1 << 63;

/// Set in a receipt's `lo` for an entry of a keyed lane.
pub(super) const KEYED_TAG: u64 = 1 << 62;

/// Both lane tags.
pub(super) const TAGS: u64 = BROADCAST_TAG | KEYED_TAG;
