//! Reclaim: what happens when memory runs out.
//!
//! - [`swap`]: swap devices (mm/swapfile.c): swap entries, the per-slot usage map, slot
//!   allocation under the device lock, the per-CPU slot caches of mm/swap_slots.c, and page I/O
//!   to memory (plain or LZ4-compressed, zram-like) or to a real file;
//! - [`swap_cache`]: the swap cache (mm/swap_state.c): entry → page while a page is being
//!   swapped, entry → shadow once it is gone;
//! - [`workingset`]: shadow entries and refault distances (mm/workingset.c);
//! - [`memcg`]: memory cgroups' page counters and limits (mm/memcontrol.c, mm/page_counter.c);
//! - [`vmscan`]: the classic LRU scan (mm/vmscan.c) for direct reclaim, memcg reclaim and
//!   kswapd, with swap-out through the reverse map;
//! - [`lru_gen`]: MGLRU's aging walk, eviction and refault feedback (mm/vmscan.c `lru_gen_*`);
//! - [`kswapd`]: the per-node background reclaimer woken at the low watermark.

pub mod kswapd;
pub mod lru_gen;
pub mod memcg;
pub mod swap;
pub mod swap_cache;
pub mod vmscan;
pub mod workingset;
