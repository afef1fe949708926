//! The pairs a launch of LongNet inside documents computes, transcribed from the kernels'
//! rules (for the host proofs of `crate::spec_documents`: its unit test and the
//! `document_launches` fuzz target), reading the call's buffer where the launch's
//! `table_offset` says. Nothing of the host's own index maps is used:
//! * compact (`index_map.cuh`, `row_of`): launch index `c` is global compact index
//!   `G = c + cbase`, slot `t = G mod m` of segment `s = G div m`, at position
//!   `seg_start[s] + o(h) + t r`; a hole at or past `seg_start[s + 1]` or outside the
//!   side's rows. A query's keys are the interval of key launch indices of
//!   `mask.cuh`'s `compact_key_indices` (`MASK_COMPACT`): its segment's slots whose
//!   positions lie in `[max(base, first key row), min(segment end, past the key rows) - 1]`
//!   (`base` = the segment's first position plus the offset), found by dividing by `r`,
//!   not by testing each key's slot;
//! * dense inside segments (`documents.cuh`): the query at position `p` of launch row `b`
//!   sees the keys `doc_first[b, p] ..= doc_last[b, p]`.

use crate::launch::LaunchSpec;
use crate::params::{OffsetRule, PatternCode};

/// The i32s of `buffer` from byte `at`, `len` of them.
fn ints(buffer: &[u8], at: usize, len: usize) -> Vec<usize> {
    buffer[at..at + 4 * len].chunks(4).map(|x| i32::from_ne_bytes(x.try_into().unwrap()) as usize).collect()
}

/// The (query position, key position) pairs launch `l` computes for head `h` of `heads`
/// in its batch row `lb` (rows of `n` positions), on tiles its forward plan visits, before
/// causality and the key limit; `buffer` is the call's (`launch::block_mask_bytes`).
pub fn pairs(l: &LaunchSpec, buffer: &[u8], lb: usize, h: usize, heads: usize, n: usize) -> Vec<(usize, usize)> {
    let p = l.params;
    let visits = |qc: usize, kc: usize| {
        l.fwd.contains(qc / l.fwd_q_tile + lb * l.fwd.rows_per_batch() as usize, kc / l.fwd_k_tile)
    };
    let (qo, ko, qr, kr) = (p.q_offset as usize, p.k_offset as usize, p.q_rows as usize, p.k_rows as usize);
    let mut out = Vec::new();
    if l.spans_in_buffer {
        assert_eq!((p.compact, p.pattern), (0, PatternCode::Dense as i32));
        let rows = p.batch as usize * n;
        let (first, last) = (ints(buffer, l.table_offset, rows), ints(buffer, l.table_offset + 4 * rows, rows));
        for qc in 0..qr {
            let span = first[lb * n + qo + qc]..=last[lb * n + qo + qc];
            out.extend((0..kr).filter(|&kc| span.contains(&(ko + kc)) && visits(qc, kc)).map(|kc| (qo + qc, ko + kc)));
        }
        return out;
    }
    assert_eq!(p.compact, 1);
    // The segment starts: up to and including the row's end.
    let mut table = Vec::new();
    for s in ints(buffer, l.table_offset, (buffer.len() - l.table_offset) / 4) {
        table.push(s);
        if s >= n {
            break;
        }
    }
    let (r, m) = (p.dil_rate as usize, p.dil_per_seg as usize);
    let o = match p.dil_rule {
        x if x == OffsetRule::HeadMod as i32 => h % r,
        x if x == OffsetRule::HeadBlock as i32 => h / heads.div_ceil(r),
        x if x == OffsetRule::Fixed as i32 => p.dil_fixed as usize,
        x => panic!("offset rule {x}"),
    };
    let slot = |c: usize, cbase: i32, offset: usize, rows: usize| {
        let g = c + cbase as usize;
        let (s, t) = (g / m, g % m);
        let pos = table[s] + o + t * r;
        (pos < table[s + 1] && (offset..offset + rows).contains(&pos)).then_some((s, pos))
    };
    let kbase = p.k_cbase as i64;
    for qc in 0..p.nq as usize {
        let Some((s, qp)) = slot(qc, p.q_cbase, qo, qr) else { continue };
        // Segment s keeps position base + t r at key launch index first + t.
        let (base, first) = (table[s] + o, (s * m) as i64 - kbase);
        let (lo, end) = (base.max(ko), table[s + 1].min(ko + kr));
        if end <= lo {
            continue;
        }
        let (t_lo, t_hi) = ((lo - base).div_ceil(r) as i64, ((end - 1 - base) / r) as i64);
        for kc in (first + t_lo).max(0)..=(first + t_hi).min(p.nk as i64 - 1) {
            let kc = kc as usize;
            if visits(qc, kc) {
                out.push((qp, base + (kc as i64 - first) as usize * r));
            }
        }
    }
    out
}
