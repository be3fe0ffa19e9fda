//! [`CachePadded`]: keeps a value on cache lines of its own.
//!
//! Counters bumped by the sending thread and counters bumped by the workers must not share a
//! cache line: every bump would pull the line from the other core, once per message on each
//! side (false sharing). 128 bytes covers the adjacent-line prefetch of current x86 parts and
//! the 128-byte lines of Apple's ARM cores.

use std::ops::Deref;

/// A value aligned (and so padded) to 128 bytes.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct CachePadded<T>(pub(crate) T);

impl<T> Deref for CachePadded<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_never_share_a_line() {
        let pair = [CachePadded(1u64), CachePadded(2u64)];
        let a = &pair[0] as *const _ as usize;
        let b = &pair[1] as *const _ as usize;
        assert_eq!(a % 128, 0);
        assert!(b - a >= 128);
        assert_eq!(*pair[1], 2);
    }
}
