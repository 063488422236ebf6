//! How a later layer of options (a call site's, over the build script's) combines with an
//! earlier one, per option (the table's `merge:`).

/// The later value wins.
pub fn replace<T>(slot: &mut Option<T>, later: T) {
    *slot = Some(later);
}

/// The later items follow the earlier ones (a list such as `keep_float` accumulates).
pub fn extend<T>(slot: &mut Option<Vec<T>>, later: Vec<T>) {
    slot.get_or_insert_with(Vec::new).extend(later);
}
