//! Reclaim's swap layer: where anonymous pages go when memory runs short, and how their return
//! is judged.
//!
//! - [`swap`]: swap devices (mm/swapfile.c): swap entries, the per-slot usage map, slot
//!   allocation under the device lock, the per-CPU slot caches of mm/swap_slots.c, and page I/O
//!   to memory (plain or LZ4-compressed, zram-like) or to a real file;
//! - [`swap_cache`]: the swap cache (mm/swap_state.c): entry → page while a page is being
//!   swapped, entry → shadow once it is gone;
//! - [`workingset`]: shadow entries and refault distances (mm/workingset.c).
//!
//! The module is self-contained: it takes plain configuration structs and arena words, and
//! reclaim (the LRU scan, `shrink_folio_list`, `do_swap_page`) builds on it.

pub mod swap;
pub mod swap_cache;
pub mod workingset;
