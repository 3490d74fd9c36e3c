//! Facts about this relay that it reports (the relay tree's `rss_bytes`),
//! limits itself by (the memory budget of writes) or is known by (its
//! persistent id in a shared database's usage rows).

/// Resident memory of this process, bytes (Linux `/proc/self/status`
/// `VmRSS`; 0 where the platform does not say).
pub(crate) fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// This relay's persistent id: `<data-dir>/relay-id`, made (16 random hex
/// digits) on first start and kept across restarts. A shared database's
/// usage rows carry it, so a restarted relay knows its own and the others
/// are told apart whatever their names. A copied data directory copies the
/// id: delete `relay-id` in the copy.
pub(crate) fn persistent_id(data_dir: &std::path::Path) -> std::io::Result<String> {
    let path = data_dir.join("relay-id");
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_owned()),
        // Empty (a crash while writing it): made anew below.
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let id = crate::ops::secret::new_epoch()[..16].to_owned();
    crate::ops::secret::write_private(&path, &id)?;
    Ok(id)
}
