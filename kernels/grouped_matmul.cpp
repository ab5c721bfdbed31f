// Grouped GEMMs over expert segments, cpu twin: the linear layer of kernels/matmul.h per segment.
#include "kernels/grouped_matmul.h"

#include <cstddef>

#include "kernels/matmul.h"

namespace loom::cpu {

void grouped_matmul_forward(float* out, const float* inp, const float* w, const float* bias,
                            const std::vector<GemmSegment>& segs, int IC, int OC) {
  const size_t wsize = size_t(IC) * OC;
  for (const GemmSegment& g : segs)
    matmul_forward(out + size_t(g.row) * OC, inp + size_t(g.row) * IC, w + g.expert * wsize,
                   bias ? bias + size_t(g.expert) * OC : nullptr, g.rows, IC, OC);
}

void grouped_matmul_backward(float* dinp, float* dw, float* dbias, const float* dout,
                             const float* inp, const float* w, const std::vector<GemmSegment>& segs,
                             int IC, int OC) {
  const size_t wsize = size_t(IC) * OC;
  for (const GemmSegment& g : segs)
    matmul_backward(dinp ? dinp + size_t(g.row) * IC : nullptr, dw + g.expert * wsize,
                    dbias ? dbias + size_t(g.expert) * OC : nullptr, dout + size_t(g.row) * OC,
                    inp + size_t(g.row) * IC, w + g.expert * wsize, g.rows, IC, OC);
}

}  // namespace loom::cpu
