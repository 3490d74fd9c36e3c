//! Paging of the Admin API's list calls: pages bounded in items and in
//! encoded bytes (so a page of large segments stays under the response
//! size limit), with the last key given as the next page's token.

use super::MAX_PAGE;

/// Most bytes of items in one list page, well under the 8 MiB response
/// limit (a page of large segments would otherwise outgrow it).
const MAX_PAGE_BYTES: usize = 4 << 20;

/// One page of `items` (sorted by key): at most `size` items and
/// [`MAX_PAGE_BYTES`] of them (but at least one), and the page token of the
/// next page (the last key given), empty when nothing is left.
pub(super) fn page<T: prost::Message>(
    items: impl Iterator<Item = T>,
    size: usize,
    key: impl Fn(&T) -> String,
) -> (Vec<T>, String) {
    let (mut out, mut bytes) = (Vec::new(), 0);
    for item in items {
        let len = item.encoded_len();
        if out.len() == size || (!out.is_empty() && bytes + len > MAX_PAGE_BYTES) {
            // `out` is not empty here (the check above), so this is its last key.
            let next = out.last().map(&key).unwrap_or_default();
            return (out, next);
        }
        bytes += len;
        out.push(item);
    }
    (out, String::new())
}

pub(super) fn page_size(n: u32) -> usize {
    if n == 0 { MAX_PAGE } else { (n as usize).min(MAX_PAGE) }
}
