//! Which of the recording thread's lock holds touched each frame: the bookkeeping the capture
//! needs to tell a list neighbour this task linked in its current hold (its own line, a cache
//! hit in the kernel too) from one another CPU linked (a line that moves). Used for the buddy
//! free lists under `zone->lock` and the LRU lists under `lru_lock`; kept only while a trace
//! records, on the recording thread.

/// A number per frame, kept by a recording thread for its own bookkeeping (which hold linked
/// or pushed a frame). Chunks of 4096 frames are allocated on first use: the bookkeeping runs
/// inside the critical sections being recorded, and whatever it costs there is replayed as
/// their compute, so it must neither hash nor zero a table the size of memory in one go.
#[derive(Default)]
struct FrameStamps {
    chunks: Vec<Option<Box<[u32]>>>,
}

impl FrameStamps {
    const SHIFT: u32 = 12;

    #[inline]
    fn get(&self, pfn: u32) -> u32 {
        match self.chunks.get((pfn >> Self::SHIFT) as usize) {
            Some(Some(c)) => c[(pfn & ((1 << Self::SHIFT) - 1)) as usize],
            _ => 0,
        }
    }

    #[inline]
    fn set(&mut self, pfn: u32, v: u32) {
        let i = (pfn >> Self::SHIFT) as usize;
        if i >= self.chunks.len() {
            if v == 0 {
                return;
            }
            self.chunks.resize_with(i + 1, || None);
        }
        let c = self.chunks[i].get_or_insert_with(|| vec![0; 1 << Self::SHIFT].into_boxed_slice());
        c[(pfn & ((1 << Self::SHIFT) - 1)) as usize] = v;
    }
}

/// One lock class's holds by the recording thread, numbered from 1, and the hold that last
/// stamped each frame (0: none, or unstamped since).
#[derive(Default)]
pub(crate) struct HoldStamps {
    hold: u32,
    stamps: FrameStamps,
}

impl HoldStamps {
    /// A new hold of the lock begins.
    #[inline]
    pub(crate) fn new_hold(&mut self) {
        self.hold = self.hold.wrapping_add(1).max(1);
    }

    /// The current hold linked (or pushed) `pfn`.
    #[inline]
    pub(crate) fn stamp(&mut self, pfn: u32) {
        let h = self.hold;
        self.stamps.set(pfn, h);
    }

    /// `pfn` left the list.
    #[inline]
    pub(crate) fn clear(&mut self, pfn: u32) {
        self.stamps.set(pfn, 0);
    }

    /// Whether the current hold stamped `pfn`.
    #[inline]
    pub(crate) fn in_this_hold(&self, pfn: u32) -> bool {
        self.hold != 0 && self.stamps.get(pfn) == self.hold
    }

    /// Whether one hold stamped both `a` and `b`.
    #[inline]
    pub(crate) fn same_hold(&self, a: u32, b: u32) -> bool {
        let x = self.stamps.get(a);
        x != 0 && x == self.stamps.get(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_belongs_to_the_hold_that_stamped_it_until_cleared() {
        let mut h = HoldStamps::default();
        h.stamp(5);
        assert!(!h.in_this_hold(5), "no hold begun: nothing is this hold's");
        h.new_hold();
        h.stamp(5);
        h.stamp(70_000);
        assert!(h.in_this_hold(5) && h.same_hold(5, 70_000));
        h.new_hold();
        h.stamp(6);
        assert!(!h.in_this_hold(5) && !h.same_hold(5, 6));
        h.clear(6);
        assert!(!h.in_this_hold(6) && !h.same_hold(6, 6));
        assert!(!h.same_hold(1 << 30, 1 << 30), "never stamped");
    }
}
