// Ring attention over the context-parallel group: K|V blocks (and, backward, their gradients)
// passed to the next rank while this rank computes on the current one.
#include "model/context_attention.h"

#include <algorithm>

#include "core/buffer.h"
#include "core/check.h"

namespace loom {

namespace {
constexpr int kTagKV = 31, kTagDKV = 32;

// The step shapes: queries from qkv (rows of QKVl), keys and values from a packed [k | v] block.
cpu::RingDims ring_dims(const BlockDims& d) {
  const int W = 2 * d.KV() * d.D();
  return cpu::RingDims{d.B, d.T, d.T, d.NH, d.KV(), d.D(), d.QKVl(), W};
}

// The [k | v] columns of qkv (N, QKVl) into kv (N, 2*KV*D).
void pack_kv(Backend& be, void* kv, const void* qkv, const BlockDims& d) {
  const size_t e = be.act_size(), W = size_t(2 * d.KV() * d.D());
  be.copy_2d(kv, W * e, byte_at(qkv, size_t(d.NH * d.D()) * e), size_t(d.QKVl()) * e, W * e,
             size_t(d.N()));
}

// cols columns of fp32 src (N, cols) into dst's columns [col0, col0 + cols) (rows of QKVl, act
// dtype), through tmp (N * cols act elements) when the act dtype is not fp32.
void put_cols(Backend& be, void* dst, int col0, const float* src, int cols, void* tmp,
              const BlockDims& d) {
  const size_t e = be.act_size(), n = size_t(d.N()), w = size_t(cols);
  const void* from = src;
  if (be.lowp()) {
    be.cast_to_act(tmp, src, n * w);
    from = tmp;
  }
  be.copy_2d(byte_at(dst, size_t(col0) * e), size_t(d.QKVl()) * e, from, w * e, w * e, n);
}
}  // namespace

std::array<size_t, 2> cp_chunk_starts(int T, int cp, int r) {
  const size_t c = size_t(T / 2);  // chunk length
  return {size_t(r) * c, size_t(2 * cp - 1 - r) * c};
}

std::vector<int32_t> cp_positions(int T, int cp, int r) {
  const size_t c = size_t(T / 2);
  const std::array<size_t, 2> first = cp_chunk_starts(T, cp, r);
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (size_t k = 0; k < 2; ++k)
    for (size_t t = 0; t < c; ++t) pos[k * c + t] = int32_t(first[k] + t);
  return pos;
}

void take_cp_rows(int32_t* out, const int32_t* full, int rows, int T, int cp, int r) {
  const size_t c = size_t(T / 2), Tf = size_t(T) * size_t(cp);
  const std::array<size_t, 2> first = cp_chunk_starts(T, cp, r);
  for (size_t i = 0; i < size_t(rows); ++i)
    for (size_t k = 0; k < 2; ++k)
      std::copy_n(full + i * Tf + first[k], c, out + i * size_t(T) + k * c);
}

void fill_position_tables(Backend& be, const BlockScratch& s, const BlockDims& d, int cp_rank) {
  if (d.cp == 1) {
    if (d.gated) be.rope_table(s.rope_cos, s.rope_sin, d.T, d.D(), d.theta);
    return;
  }
  std::vector<int32_t> all;
  for (int r = 0; r < d.cp; ++r) {
    const std::vector<int32_t> p = cp_positions(d.T, d.cp, r);
    all.insert(all.end(), p.begin(), p.end());
  }
  be.from_host(s.ring_pos, all.data(), all.size() * sizeof(int32_t));
  if (!d.gated) return;
  // The tables of the whole sequence, then this rank's two chunks of rows.
  const size_t half = size_t(d.D() / 2), full = size_t(d.T) * size_t(d.cp);
  Buffer cos(full * half * sizeof(float), be.device()), sin(cos.bytes(), be.device());
  be.rope_table(static_cast<float*>(cos.data()), static_cast<float*>(sin.data()), int(full), d.D(),
                d.theta);
  const size_t c = size_t(d.T / 2), row = half * sizeof(float);
  const std::array<size_t, 2> first = cp_chunk_starts(d.T, d.cp, cp_rank);
  for (int k = 0; k < 2; ++k) {
    be.copy(byte_at(s.rope_cos, k * c * row), byte_at(cos.data(), first[k] * row), c * row);
    be.copy(byte_at(s.rope_sin, k * c * row), byte_at(sin.data(), first[k] * row), c * row);
  }
  be.synchronize();  // the temporary tables are freed on return
}

void ring_attention_forward(Backend& be, void* out, float* lse, const void* qkv,
                            const BlockScratch& s, const BlockDims& d, Comm& cp) {
  const cpu::RingDims rd = ring_dims(d);
  const int n = cp.size(), me = cp.rank(), next = (me + 1) % n, prev = (me + n - 1) % n;
  const size_t kvn = size_t(d.N()) * size_t(rd.ldkv), vcol = size_t(d.KV() * d.D()) * be.act_size();
  const DType t = be.act_dtype();
  const int32_t* qpos = s.ring_pos + size_t(me) * d.T;
  pack_kv(be, s.ring_kv[0], qkv, d);
  be.ring_attention_begin(s.ring_acc, s.ring_m, s.ring_l, rd);
  for (int i = 0; i < n; ++i) {
    void* cur = s.ring_kv[i % 2];
    MPI_Request sent = MPI_REQUEST_NULL;
    CommRequest got;
    if (i + 1 < n) {  // the block moves on while this rank computes on it
      sent = cp.isend(cur, kvn, t, next, kTagKV, Ring::Next);
      got = cp.start_recv(s.ring_kv[(i + 1) % 2], kvn, t, prev, kTagKV, Ring::Next);
    }
    const int owner = (me - i + n) % n;
    be.ring_attention_forward_step(s.ring_acc, s.ring_m, s.ring_l, qkv, cur, byte_at(cur, vcol),
                                   qpos, s.ring_pos + size_t(owner) * d.T, rd, s.datt);
    cp.wait(got);
    cp.wait(&sent);
  }
  cp.wait_sends();
  be.ring_attention_finish(out, lse, s.ring_acc, s.ring_m, s.ring_l, rd);
}

void ring_attention_backward(Backend& be, void* dqkv, const void* dout, const void* qkv,
                             const void* out, const float* lse, const BlockScratch& s,
                             const BlockDims& d, Comm& cp) {
  const cpu::RingDims rd = ring_dims(d);
  const int n = cp.size(), me = cp.rank(), next = (me + 1) % n, prev = (me + n - 1) % n;
  const size_t kvn = size_t(d.N()) * size_t(rd.ldkv), kvcols = size_t(d.KV() * d.D());
  const size_t vcol = kvcols * be.act_size();
  const DType t = be.act_dtype();
  const int32_t* qpos = s.ring_pos + size_t(me) * d.T;
  float* dq = s.ring_acc;
  float* delta = s.ring_m;
  pack_kv(be, s.ring_kv[0], qkv, d);
  be.zero(s.ring_dkv[0], kvn * sizeof(float));
  be.zero(dq, size_t(d.N()) * size_t(d.QKVl()) * sizeof(float));  // rows of QKVl, as q's
  be.ring_attention_delta(delta, dout, out, rd);
  // Step i: the keys of rank me-i with the gradient its earlier holders summed; after the step
  // the gradient moves on with them, and after the last one it arrives back at its owner.
  for (int i = 0; i < n; ++i) {
    void* kv = s.ring_kv[i % 2];
    float* dkv = s.ring_dkv[i % 2];
    MPI_Request kv_sent = MPI_REQUEST_NULL;
    CommRequest kv_got;
    if (i + 1 < n) {
      kv_sent = cp.isend(kv, kvn, t, next, kTagKV, Ring::Next);
      kv_got = cp.start_recv(s.ring_kv[(i + 1) % 2], kvn, t, prev, kTagKV, Ring::Next);
    }
    const int owner = (me - i + n) % n;
    be.ring_attention_backward_step(dq, dkv, dkv + kvcols, dout, qkv, kv, byte_at(kv, vcol), lse,
                                    delta, qpos, s.ring_pos + size_t(owner) * d.T, rd, s.datt);
    MPI_Request dkv_sent = cp.isend(dkv, kvn, DType::F32, next, kTagDKV, Ring::Next);
    CommRequest dkv_got =
        cp.start_recv(s.ring_dkv[(i + 1) % 2], kvn, DType::F32, prev, kTagDKV, Ring::Next);
    cp.wait(kv_got);
    cp.wait(dkv_got);
    cp.wait(&kv_sent);
    cp.wait(&dkv_sent);
  }
  cp.wait_sends();
  // dqkv = [dq | dk | dv] in the act dtype: dq's rows whole (their k|v columns are zero), then
  // the returned k|v gradient over those columns (converted through a free K|V block).
  be.cast_to_act(dqkv, dq, size_t(d.N()) * size_t(d.QKVl()));
  put_cols(be, dqkv, d.Cl(), s.ring_dkv[n % 2], int(2 * kvcols), s.ring_kv[0], d);
}

}  // namespace loom
