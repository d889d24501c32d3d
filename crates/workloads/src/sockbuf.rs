//! Loopback TCP's socket buffers on the engine: what a `send` over a connection to the same
//! machine allocates, and where it is freed, as Linux 5.19 and later do it.
//!
//! * **The skb.** `tcp_sendmsg_locked` takes a new segment from `tcp_stream_alloc_skb`, an
//!   `alloc_skb_fclone`: one object of `skbuff_fclone_cache` (two `struct sk_buff` and a
//!   reference count, about 0.47 KiB) and a small linear head for the headers
//!   (`skb_small_head_cache` from 6.3, a kmalloc before). Here both are one kmalloc of
//!   [`SKB_FCLONE_SIZE`] bytes on the sending CPU: the engine's slab allocator has the kmalloc
//!   caches only, and the 512-byte one holds an object of that size in the same slab shape
//!   (a per-CPU slab, the node's partial list).
//! * **The payload.** A device that does scatter-gather (loopback does) gets the user's bytes
//!   copied into page fragments, not into the skb's head: `skb_copy_to_page_nocache` into
//!   `sk_page_frag`, which for a user task's socket is the task's own `current->task_frag`,
//!   refilled by `skb_page_frag_refill` (net/core/sock.c) with an order-3 compound page
//!   (`SKB_FRAG_PAGE_ORDER`, 32 KiB; [`FRAG_ORDER`]), or a single page when that fails. Every
//!   piece handed to an skb takes a reference on its page, and the task holds one of its own
//!   ([`PageFrag`]). A refill first looks whether the task's reference is the only one left
//!   (every skb carved from the page has been freed): then the page is reused from its start;
//!   else, when fewer than 32 bytes are left, the task puts its reference and takes a new page,
//!   the last put freeing the old one. A segment longer than the frag's room takes the rest
//!   from the next page (an skb has up to 17 fragments, `MAX_SKB_FRAGS`).
//! * **The free.** The receiver copies the payload out in `tcp_recvmsg` and releases the skb
//!   with `skb_attempt_defer_free` (net/core/skbuff.c, 5.19): an skb allocated on another CPU
//!   is queued on that CPU's `softnet_data.defer_list` and freed there, in its next
//!   `net_rx_action`. So the sending CPU frees what it allocated ([`SockBufs::free`] on the
//!   CPU that called [`SockBufs::alloc_skb`]): its kmalloc goes back to its own per-CPU slab,
//!   and its fragments' puts to its own per-CPU page lists. What crosses CPUs is the payload's
//!   lines (written by the sender, read by the receiver) and the defer list's lock, which the
//!   engine does not model.
//!
//! Not modelled: the fast clone's two halves (TCP transmits the clone, which loopback delivers
//! to the receiver, and keeps the original on the retransmit queue until the receiver's ACK
//! frees it on the sender's side; whichever is freed last releases the object and the
//! fragments, which in the usual order is the receiver's defer-free, as here), the defer
//! list's limits (`net.core.skb_defer_max`: an skb over it is freed where it was read, and an
//! IPI kicks the owning CPU at half), the socket's memory accounting (`sk_forward_alloc`, the
//! memcg's socket charge), the receive and send queues and their locks, and the TCP headers.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use pagelab_mm::alloc::slab::Obj;
use pagelab_mm::{CpuId, Gfp, Mem, PAGE_SIZE, Pfn};

use crate::netpipe::{Kmalloc, KmallocError};

/// Why a segment could not be allocated.
#[derive(Debug, thiserror::Error)]
pub enum SkbError {
    #[error("a segment of {0} bytes needs more than {MAX_SKB_FRAGS} fragments")]
    TooLong(usize),
    #[error(transparent)]
    Alloc(#[from] KmallocError),
}

/// Bytes of the skb object a TCP send allocates (`skbuff_fclone_cache`'s object, rounded up
/// to the kmalloc class that stands in for it).
pub const SKB_FCLONE_SIZE: usize = 512;

/// The page frag's order (`SKB_FRAG_PAGE_ORDER`: `get_order(32768)`).
pub const FRAG_ORDER: u32 = 3;

/// The least room a refill leaves in the frag: TCP asks `skb_page_frag_refill` for 32 bytes.
pub const FRAG_MIN: usize = 32;

/// Most fragments one skb holds (`MAX_SKB_FRAGS`).
pub const MAX_SKB_FRAGS: usize = 17;

/// A piece of a frag page: the block's head frame and order, and the bytes of it this skb
/// holds (a reference on the block each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frag {
    pub block: Pfn,
    pub order: u32,
    pub offset: u32,
    pub len: u32,
}

/// A task's `task_frag`: the block it carves payloads from and how much of it is used. The
/// task holds a reference on the block until it moves to the next one
/// ([`SockBufs::release_frag`] when it exits).
#[derive(Debug, Default)]
pub struct PageFrag {
    block: Option<(Pfn, u32)>,
    offset: usize,
}

impl PageFrag {
    pub fn new() -> PageFrag {
        PageFrag::default()
    }
}

/// One segment: its skb object and its payload's fragments. Not freed on drop: the engine's
/// memory goes back only through [`SockBufs::free`], and [`SockBufs::quiesce`] finds what was
/// not.
#[derive(Debug)]
pub struct Skb {
    head: Obj,
    frags: Vec<Frag>,
    len: usize,
    /// The CPU that allocated it, where it is freed (`skb->alloc_cpu`).
    pub alloc_cpu: CpuId,
}

impl Skb {
    /// Payload bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The payload's `i`-th 8-byte word, in whichever fragment holds it.
    pub fn word<'a>(&self, mem: &'a Mem, i: usize) -> &'a AtomicU64 {
        let mut byte = 8 * i;
        for f in &self.frags {
            if byte < f.len as usize {
                let obj = Obj {
                    pfn: f.block,
                    offset: f.offset,
                };
                return obj.word(mem, byte / 8);
            }
            byte -= f.len as usize;
        }
        panic!("payload word {i} beyond the skb's {} bytes", self.len);
    }
}

/// The socket buffers of one engine: kmalloc for the skbs, the page allocator for the frags,
/// and a count of what is live, so that a run can check it gave everything back.
pub struct SockBufs {
    km: Kmalloc,
    skbs: AtomicI64,
    blocks: AtomicI64,
}

impl SockBufs {
    pub fn new(mem: Arc<Mem>) -> SockBufs {
        SockBufs {
            km: Kmalloc::new(mem),
            skbs: AtomicI64::new(0),
            blocks: AtomicI64::new(0),
        }
    }

    pub fn mem(&self) -> &Arc<Mem> {
        self.km.mem()
    }

    pub fn kmalloc(&self) -> &Kmalloc {
        &self.km
    }

    /// Up to `want` bytes (a multiple of 8) from `frag`'s block, as `skb_page_frag_refill`
    /// gives them: the block reused from its start when the task holds the only reference
    /// left, a new one on `cpu` (order 3, else order 0) when fewer than [`FRAG_MIN`] bytes are
    /// left.
    fn take(&self, frag: &mut PageFrag, cpu: CpuId, want: usize) -> Result<Frag, SkbError> {
        let mem = self.mem();
        if let Some((block, _)) = frag.block
            && mem.pages()[block].refcount.load(Relaxed) == 1
        {
            frag.offset = 0;
        }
        let room = |f: &PageFrag| {
            f.block
                .map_or(0, |(_, order)| (PAGE_SIZE << order) - f.offset)
        };
        if room(frag) < FRAG_MIN {
            self.release_frag(frag, cpu);
            let (pfn, order) = match mem.alloc_pages(cpu, FRAG_ORDER, Gfp::KERNEL.with_comp()) {
                Ok(pfn) => (pfn, FRAG_ORDER),
                Err(_) => (
                    mem.alloc_pages(cpu, 0, Gfp::KERNEL)
                        .map_err(KmallocError::from)?,
                    0,
                ),
            };
            self.blocks.fetch_add(1, Relaxed);
            frag.block = Some((pfn, order));
            frag.offset = 0;
        }
        let (block, order) = frag.block.expect("refilled above");
        let len = want.min(room(frag));
        // The skb's reference on the block (`get_page` per fragment).
        mem.pages()[block].refcount.fetch_add(1, Relaxed);
        let f = Frag {
            block,
            order,
            offset: frag.offset as u32,
            len: len as u32,
        };
        frag.offset += len;
        Ok(f)
    }

    /// Puts one reference on a frag block, on `cpu`.
    fn put(&self, cpu: CpuId, block: Pfn, order: u32) {
        if self.mem().free_pages(cpu, block, order) {
            self.blocks.fetch_sub(1, Relaxed);
        }
    }

    /// Drops the task's own reference on its frag block (`put_page` when it moves on, or when
    /// the task exits), on `cpu`.
    pub fn release_frag(&self, frag: &mut PageFrag, cpu: CpuId) {
        if let Some((block, order)) = frag.block.take() {
            self.put(cpu, block, order);
        }
        frag.offset = 0;
    }

    /// `tcp_stream_alloc_skb` and the payload's copy into the task's frag: an skb of `len`
    /// bytes (rounded up to whole words) on `cpu`, its payload carved from `frag`.
    pub fn alloc_skb(&self, frag: &mut PageFrag, cpu: CpuId, len: usize) -> Result<Skb, SkbError> {
        let len = len.div_ceil(8) * 8;
        if len > MAX_SKB_FRAGS * (PAGE_SIZE << FRAG_ORDER) {
            return Err(SkbError::TooLong(len));
        }
        let mem = self.mem();
        let head = self.km.kmalloc(cpu, SKB_FCLONE_SIZE)?;
        self.skbs.fetch_add(1, Relaxed);
        let mut skb = Skb {
            head,
            frags: Vec::new(),
            len,
            alloc_cpu: cpu,
        };
        let mut left = len;
        while left > 0 {
            let piece = if skb.frags.len() == MAX_SKB_FRAGS {
                Err(SkbError::TooLong(len))
            } else {
                self.take(frag, cpu, left)
            };
            match piece {
                Ok(f) => {
                    left -= f.len as usize;
                    skb.frags.push(f);
                }
                Err(e) => {
                    self.free(skb);
                    return Err(e);
                }
            }
        }
        // The skb's fields the send writes (`skb->len`, the fragment count).
        head.word(mem, 0).store(len as u64, Relaxed);
        head.word(mem, 1).store(skb.frags.len() as u64, Relaxed);
        Ok(skb)
    }

    /// Frees `skb` on the CPU that allocated it, as `skb_attempt_defer_free` has it done there:
    /// the object back to that CPU's slab, each fragment's reference put (the block freed to
    /// that CPU's lists by its last).
    pub fn free(&self, skb: Skb) {
        let cpu = skb.alloc_cpu;
        self.km.kfree(cpu, skb.head);
        for f in skb.frags {
            self.put(cpu, f.block, f.order);
        }
        self.skbs.fetch_sub(1, Relaxed);
    }

    /// After a run, every task's frag released: gives the empty slabs back and checks that no
    /// skb, slab object or frag block is left.
    pub fn quiesce(&self) -> Result<(), String> {
        let (skbs, blocks) = (self.skbs.load(Relaxed), self.blocks.load(Relaxed));
        if skbs != 0 || blocks != 0 {
            return Err(format!(
                "{skbs} socket buffers and {blocks} page frag blocks still live after the run"
            ));
        }
        let slab = self.km.slab();
        slab.shrink_on(CpuId(0));
        let c = slab.check()?.total();
        if c.objects_in_use != 0 || c.pages != 0 {
            return Err(format!(
                "{} skb objects in {} slab frames still live after the run",
                c.objects_in_use, c.pages
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pagelab_mm::{MemConfig, Policy};

    fn bufs() -> SockBufs {
        let mem = Mem::new(&MemConfig::new(64 << 20, 2), &Policy::default()).unwrap();
        SockBufs::new(Arc::new(mem))
    }

    /// Payloads are carved from one order-3 block until it is used up, each skb holding a
    /// reference; the block goes back to the allocator only when the task has moved on and the
    /// last skb carved from it is freed. A segment crossing the block's end takes the rest
    /// from the next block. Nothing is left once every skb and the frag are released, and
    /// quiesce finds what was not.
    #[test]
    fn skbs_share_a_frag_block_and_the_last_put_frees_it() {
        let sb = bufs();
        let mem = sb.mem().clone();
        let before = mem.check().unwrap().allocated;
        let cpu = CpuId(1);
        let mut frag = PageFrag::new();
        // Segments of 10 000 bytes: three fit in 32 KiB, the fourth straddles two blocks.
        let mut skbs: Vec<Skb> = (0..4)
            .map(|_| sb.alloc_skb(&mut frag, cpu, 10_000).unwrap())
            .collect();
        assert_eq!(skbs[0].frags.len(), 1);
        assert_eq!(skbs[3].frags.len(), 2, "{:?}", skbs[3].frags);
        let first = skbs[0].frags[0].block;
        assert_eq!(skbs[2].frags[0].block, first);
        assert_ne!(skbs[3].frags[1].block, first);
        assert_eq!(skbs[3].frags[1].offset, 0);
        // The payload's words land in the fragments and read back.
        for (n, s) in skbs.iter().enumerate() {
            for i in 0..s.len() / 8 {
                s.word(&mem, i).store((n * 100_000 + i) as u64, Relaxed);
            }
        }
        for (n, s) in skbs.iter().enumerate() {
            for i in 0..s.len() / 8 {
                assert_eq!(s.word(&mem, i).load(Relaxed), (n * 100_000 + i) as u64);
            }
        }
        // Four skbs on the first block; the task's own reference moved to the second.
        assert_eq!(mem.pages()[first].refcount.load(Relaxed), 4);
        let last = skbs.pop().unwrap();
        for s in skbs {
            sb.free(s);
        }
        assert_eq!(
            mem.pages()[first].refcount.load(Relaxed),
            1,
            "the straddling skb keeps the first block"
        );
        let e = sb.quiesce().unwrap_err();
        assert!(e.contains("1 socket buffers and 2 page frag blocks"), "{e}");
        sb.free(last);
        sb.release_frag(&mut frag, cpu);
        sb.quiesce().unwrap();
        mem.drain_all_pages();
        assert_eq!(mem.check().unwrap().allocated, before);
    }

    /// A segment that needs more than 17 fragments is refused, whether its length says so up
    /// front or the frag's room makes it so half-way (a live skb keeps the first block, so 17
    /// blocks' worth needs 18 pieces), and either leaves nothing behind.
    #[test]
    fn a_segment_beyond_the_fragments_is_refused() {
        let sb = bufs();
        let cpu = CpuId(0);
        let mut frag = PageFrag::new();
        let whole = MAX_SKB_FRAGS * (PAGE_SIZE << FRAG_ORDER);
        let e = sb.alloc_skb(&mut frag, cpu, whole + 8).unwrap_err();
        assert!(e.to_string().contains("more than 17 fragments"), "{e}");
        let small = sb.alloc_skb(&mut frag, cpu, 64).unwrap();
        let e = sb.alloc_skb(&mut frag, cpu, whole).unwrap_err();
        assert!(e.to_string().contains("more than 17 fragments"), "{e}");
        // The refused segment's pieces went back: only the small skb and the task hold blocks.
        sb.free(small);
        sb.release_frag(&mut frag, cpu);
        sb.quiesce().unwrap();
    }

    /// A task whose skbs have all been freed reuses its frag block from the start (the refill's
    /// reference test), so a sender that keeps one segment in flight at a time stays on one
    /// block.
    #[test]
    fn a_frag_block_is_reused_once_its_skbs_are_freed() {
        let sb = bufs();
        let cpu = CpuId(0);
        let mut frag = PageFrag::new();
        let first = sb.alloc_skb(&mut frag, cpu, 1000).unwrap();
        let block = first.frags[0].block;
        sb.free(first);
        for _ in 0..100 {
            let s = sb.alloc_skb(&mut frag, cpu, 1000).unwrap();
            assert_eq!((s.frags[0].block, s.frags[0].offset), (block, 0));
            sb.free(s);
        }
        // Two in flight: the second is carved after the first.
        let a = sb.alloc_skb(&mut frag, cpu, 1000).unwrap();
        let b = sb.alloc_skb(&mut frag, cpu, 1000).unwrap();
        assert_eq!(b.frags[0].offset, 1000);
        sb.free(a);
        sb.free(b);
        sb.release_frag(&mut frag, cpu);
        sb.quiesce().unwrap();
    }
}
