// Packed sequences (docs/semantics.md, section 16): documents inside a batch row. The GPU
// runs them with the patterns whose rule is a difference of positions (dense, sliding
// window), for which the document-relative rule is the global one cut to the document: a
// query at position i of batch row b sees only keys in [doc_first(b, i), doc_last(b, i)].
// The host uploads both ends per (row, position) (Params::doc_first, doc_last; null without
// documents), so no kernel searches a boundary list. Three levels keep the cost at the
// pairs that exist: tile pairs that share no document are not in the tile plan (the host
// builds one plan per batch row, Params::plan_rows); tiles inside one document need no
// document test (docs_cover, part of tile_full); the rest cut each query row's key
// interval (mask.cuh).

//
// All of it exists only in the module variant for launches with documents (DOCS 1, from
// the contract header; crates/cuda/src/variant.rs): with DOCS 0 the helpers below are
// constants and the masks and tile tests compile to what they are without documents.

// The key interval of the query at global position `pos` of batch row b: its document's
// first and last position; [-1, CUT_MAX - 1] (no cut) without documents or without a
// query (pos < 0).
struct DocSpan {
    int lo, hi;
};
__device__ __forceinline__ DocSpan doc_span(const Params& p, int b, int pos) {
    if (!DOCS || !p.doc_first || pos < 0) return {-1, 0x7ffffffe};
    const size_t at = (size_t)b * p.seq_len + pos;
    return {__ldg(p.doc_first + at), __ldg(p.doc_last + at)};
}
// Does the key at position `kpos` lie inside the query's document?
__device__ __forceinline__ bool in_doc(int kpos, DocSpan d) { return !DOCS || (kpos >= d.lo && kpos <= d.hi); }
// Do the queries at positions qfirst..qlast (ascending) and the keys at kfirst..klast all
// share one document in row b? Both document ends grow with the position, so the last
// query's document start and the first query's document end decide.
__device__ __forceinline__ bool docs_cover(const Params& p, int b, int qfirst, int qlast, int kfirst, int klast) {
    return !DOCS || !p.doc_first || (doc_span(p, b, qlast).lo <= kfirst && doc_span(p, b, qfirst).hi >= klast);
}
// The row of the launch's tile plan that lists tile t's partners in batch row b.
__device__ __forceinline__ int plan_row(const Params& p, int b, int t) { return t + b * p.plan_rows; }
