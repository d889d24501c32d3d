//! Intrusive doubly linked lists of frames (`struct list_head` through `page->lru`).
//!
//! The links live in the frames' metadata ([`Page::next`]/[`Page::prev`]) as pfns, so a list
//! head is three words and moving a page between lists allocates nothing, as in the kernel. A
//! `PageList` value is owned by whatever lock protects it (a zone's free area, a pcp, an
//! lruvec): only that lock's holder touches the links of the frames on it, which is why the
//! links can be `Relaxed` atomics. The head end is "hot" (most recently added), the tail end
//! "cold", matching `list_add` and `list_add_tail`.
//!
//! [`Page::next`]: crate::page::Page::next
//! [`Page::prev`]: crate::page::Page::prev

use std::sync::atomic::Ordering::Relaxed;

use crate::page::{PageArray, Pfn};

const NIL: u32 = Pfn::NIL;

/// A list of frames linked through their metadata.
#[derive(Debug)]
pub struct PageList {
    head: u32,
    tail: u32,
    len: usize,
}

impl Default for PageList {
    fn default() -> Self {
        Self::new()
    }
}

impl PageList {
    pub const fn new() -> Self {
        PageList {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub fn first(&self) -> Option<Pfn> {
        (self.head != NIL).then_some(Pfn(self.head))
    }

    #[inline]
    pub fn last(&self) -> Option<Pfn> {
        (self.tail != NIL).then_some(Pfn(self.tail))
    }

    /// `list_add`: insert at the hot end.
    #[inline]
    pub fn push_front(&mut self, pages: &PageArray, pfn: Pfn) {
        let p = &pages[pfn];
        debug_assert_eq!(p.next.load(Relaxed), NIL, "{pfn:?} already linked");
        p.prev.store(NIL, Relaxed);
        p.next.store(self.head, Relaxed);
        if self.head != NIL {
            pages[Pfn(self.head)].prev.store(pfn.0, Relaxed);
        } else {
            self.tail = pfn.0;
        }
        self.head = pfn.0;
        self.len += 1;
    }

    /// `list_add_tail`: insert at the cold end.
    #[inline]
    pub fn push_back(&mut self, pages: &PageArray, pfn: Pfn) {
        let p = &pages[pfn];
        debug_assert_eq!(p.next.load(Relaxed), NIL, "{pfn:?} already linked");
        p.next.store(NIL, Relaxed);
        p.prev.store(self.tail, Relaxed);
        if self.tail != NIL {
            pages[Pfn(self.tail)].next.store(pfn.0, Relaxed);
        } else {
            self.head = pfn.0;
        }
        self.tail = pfn.0;
        self.len += 1;
    }

    /// Remove and return the hot end.
    #[inline]
    pub fn pop_front(&mut self, pages: &PageArray) -> Option<Pfn> {
        let pfn = self.first()?;
        self.remove(pages, pfn);
        Some(pfn)
    }

    /// Remove and return the cold end.
    #[inline]
    pub fn pop_back(&mut self, pages: &PageArray) -> Option<Pfn> {
        let pfn = self.last()?;
        self.remove(pages, pfn);
        Some(pfn)
    }

    /// `list_del`: unlink `pfn`, which must be on this list.
    #[inline]
    pub fn remove(&mut self, pages: &PageArray, pfn: Pfn) {
        let p = &pages[pfn];
        let next = p.next.load(Relaxed);
        let prev = p.prev.load(Relaxed);
        if prev != NIL {
            pages[Pfn(prev)].next.store(next, Relaxed);
        } else {
            debug_assert_eq!(self.head, pfn.0, "{pfn:?} is not on this list");
            self.head = next;
        }
        if next != NIL {
            pages[Pfn(next)].prev.store(prev, Relaxed);
        } else {
            debug_assert_eq!(self.tail, pfn.0, "{pfn:?} is not on this list");
            self.tail = prev;
        }
        p.next.store(NIL, Relaxed);
        p.prev.store(NIL, Relaxed);
        self.len -= 1;
    }

    /// `list_splice`: move every frame of `other` to the front of `self` in O(1), keeping order.
    pub fn splice_front(&mut self, pages: &PageArray, other: &mut PageList) {
        if other.is_empty() {
            return;
        }
        if self.is_empty() {
            std::mem::swap(self, other);
            return;
        }
        pages[Pfn(other.tail)].next.store(self.head, Relaxed);
        pages[Pfn(self.head)].prev.store(other.tail, Relaxed);
        self.head = other.head;
        self.len += other.len;
        *other = PageList::new();
    }

    /// `list_splice_tail`: move every frame of `other` to the back of `self` in O(1).
    pub fn splice_back(&mut self, pages: &PageArray, other: &mut PageList) {
        if other.is_empty() {
            return;
        }
        if self.is_empty() {
            std::mem::swap(self, other);
            return;
        }
        pages[Pfn(self.tail)].next.store(other.head, Relaxed);
        pages[Pfn(other.head)].prev.store(self.tail, Relaxed);
        self.tail = other.tail;
        self.len += other.len;
        *other = PageList::new();
    }

    /// Walk from hot to cold. The caller holds the list's lock for the whole walk.
    pub fn iter<'a>(&self, pages: &'a PageArray) -> PageListIter<'a> {
        PageListIter {
            pages,
            cur: self.head,
            left: self.len,
        }
    }
}

/// Iterator over a [`PageList`], hot end first.
pub struct PageListIter<'a> {
    pages: &'a PageArray,
    cur: u32,
    left: usize,
}

impl Iterator for PageListIter<'_> {
    type Item = Pfn;

    fn next(&mut self) -> Option<Pfn> {
        // `left` bounds the walk, so a corrupted (cyclic) list cannot hang an invariant check.
        if self.cur == NIL || self.left == 0 {
            return None;
        }
        let pfn = Pfn(self.cur);
        self.cur = self.pages[pfn].next.load(Relaxed);
        self.left -= 1;
        Some(pfn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(l: &PageList, pages: &PageArray) -> Vec<u32> {
        l.iter(pages).map(|p| p.0).collect()
    }

    #[test]
    fn push_pop_both_ends() {
        let pages = PageArray::new(8);
        let mut l = PageList::new();
        l.push_front(&pages, Pfn(1));
        l.push_front(&pages, Pfn(2));
        l.push_back(&pages, Pfn(3));
        assert_eq!(collect(&l, &pages), vec![2, 1, 3]);
        assert_eq!(l.pop_back(&pages), Some(Pfn(3)));
        assert_eq!(l.pop_front(&pages), Some(Pfn(2)));
        assert_eq!(l.pop_front(&pages), Some(Pfn(1)));
        assert_eq!(l.pop_front(&pages), None);
        assert!(l.is_empty());
    }

    #[test]
    fn remove_middle_and_splice_keep_order() {
        let pages = PageArray::new(8);
        let mut a = PageList::new();
        let mut b = PageList::new();
        for i in 0..4 {
            a.push_back(&pages, Pfn(i));
        }
        for i in 4..7 {
            b.push_back(&pages, Pfn(i));
        }
        a.remove(&pages, Pfn(2));
        assert_eq!(collect(&a, &pages), vec![0, 1, 3]);
        a.splice_back(&pages, &mut b);
        assert_eq!(collect(&a, &pages), vec![0, 1, 3, 4, 5, 6]);
        assert!(b.is_empty());
        let mut c = PageList::new();
        c.push_back(&pages, Pfn(2));
        a.splice_front(&pages, &mut c);
        assert_eq!(collect(&a, &pages), vec![2, 0, 1, 3, 4, 5, 6]);
        assert_eq!(a.len(), 7);
        assert_eq!(a.last(), Some(Pfn(6)));
    }
}
