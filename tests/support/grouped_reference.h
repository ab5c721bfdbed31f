// The grouped expert GEMMs (kernels/grouped_matmul.h) in double, with each result's error bound
// for an fp32 computation in any summation order: the cpu and cuda twins' independent reference.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "kernels/grouped_matmul.h"

namespace loom::test {

// A value in double and the sum of the magnitudes of the terms that make it.
struct Bounded {
  std::vector<double> value, absum;
  std::vector<int> terms;  // how many terms each sums
};

// An fp32 sum of n terms (products rounded once each) differs from the exact sum of the fp32
// inputs by at most gamma(n + 1) * (sum of magnitudes), in any order (Higham, Accuracy and
// Stability of Numerical Algorithms, 3.5), gamma(n) = n u / (1 - n u), u = 2^-24.
inline double fp32_gamma(int n) {
  const double u = std::ldexp(1.0, -24);
  return (n + 1) * u / (1.0 - (n + 1) * u);
}

// The forward: out rows of each segment = inp rows @ w_e + bias_e; rows in no segment keep
// `out0`.
inline Bounded grouped_forward_ref(const std::vector<float>& out0, const std::vector<float>& inp,
                                   const std::vector<float>& w, const std::vector<float>* bias,
                                   const std::vector<cpu::GemmSegment>& segs, int IC, int OC) {
  Bounded r{std::vector<double>(out0.begin(), out0.end()), std::vector<double>(out0.size(), 0.0),
            std::vector<int>(out0.size(), 0)};
  for (const cpu::GemmSegment& s : segs)
    for (int n = s.row; n < s.row + s.rows; ++n)
      for (int o = 0; o < OC; ++o) {
        const size_t at = size_t(n) * OC + o;
        double v = bias ? (*bias)[size_t(s.expert) * OC + o] : 0.0, a = std::fabs(v);
        for (int i = 0; i < IC; ++i) {
          const double p =
              double(inp[size_t(n) * IC + i]) * w[size_t(s.expert) * IC * OC + size_t(i) * OC + o];
          v += p, a += std::fabs(p);
        }
        r.value[at] = v, r.absum[at] = a, r.terms[at] = IC + 1;
      }
  return r;
}

// The backward: dinp rows = dout rows @ w_e^T; dw_e = dw0_e + sum over its segments of
// inp^T dout; dbias_e = dbias0_e + column sums of its segments' dout.
struct GroupedGrads {
  Bounded dinp, dw, dbias;
};
inline GroupedGrads grouped_backward_ref(const std::vector<float>& dw0,
                                         const std::vector<float>& dbias0,
                                         const std::vector<float>& dout,
                                         const std::vector<float>& inp, const std::vector<float>& w,
                                         const std::vector<cpu::GemmSegment>& segs, int R, int IC,
                                         int OC) {
  GroupedGrads g;
  g.dinp = Bounded{std::vector<double>(size_t(R) * IC, 0.0),
                   std::vector<double>(size_t(R) * IC, 0.0), std::vector<int>(size_t(R) * IC, 0)};
  g.dw = Bounded{std::vector<double>(dw0.begin(), dw0.end()), std::vector<double>(dw0.size()),
                 std::vector<int>(dw0.size(), 1)};
  g.dbias = Bounded{std::vector<double>(dbias0.begin(), dbias0.end()),
                    std::vector<double>(dbias0.size()), std::vector<int>(dbias0.size(), 1)};
  for (size_t i = 0; i < dw0.size(); ++i) g.dw.absum[i] = std::fabs(dw0[i]);
  for (size_t i = 0; i < dbias0.size(); ++i) g.dbias.absum[i] = std::fabs(dbias0[i]);
  for (const cpu::GemmSegment& s : segs) {
    const size_t we = size_t(s.expert) * IC * OC;
    for (int n = s.row; n < s.row + s.rows; ++n) {
      for (int i = 0; i < IC; ++i) {
        const size_t at = size_t(n) * IC + i;
        for (int o = 0; o < OC; ++o) {
          const double p = double(dout[size_t(n) * OC + o]) * w[we + size_t(i) * OC + o];
          g.dinp.value[at] += p, g.dinp.absum[at] += std::fabs(p);
        }
        g.dinp.terms[at] = OC;
      }
      for (int i = 0; i < IC; ++i)
        for (int o = 0; o < OC; ++o) {
          const size_t at = we + size_t(i) * OC + o;
          const double p = double(inp[size_t(n) * IC + i]) * dout[size_t(n) * OC + o];
          g.dw.value[at] += p, g.dw.absum[at] += std::fabs(p), g.dw.terms[at]++;
        }
      for (int o = 0; o < OC; ++o) {
        const size_t at = size_t(s.expert) * OC + o;
        const double p = dout[size_t(n) * OC + o];
        g.dbias.value[at] += p, g.dbias.absum[at] += std::fabs(p), g.dbias.terms[at]++;
      }
    }
  }
  return g;
}

// The first element of got outside want's bound, as text ("" when every one is inside).
inline std::string outside_bound(const std::vector<float>& got, const Bounded& want) {
  if (got.size() != want.value.size()) return "size " + std::to_string(got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = fp32_gamma(want.terms[i]) * want.absum[i] +
                         std::fabs(want.value[i]) * std::ldexp(1.0, -24);  // the final rounding
    if (!(std::fabs(double(got[i]) - want.value[i]) <= bound))
      return "element " + std::to_string(i) + ": " + std::to_string(got[i]) + " vs " +
             std::to_string(want.value[i]) + " (bound " + std::to_string(bound) + ")";
  }
  return "";
}

// Segments as the MoE layer makes them: experts out of order, a one-row segment, an expert with
// two segments (expert parallelism: rows of two source ranks) and rows in no segment at the end.
inline std::vector<cpu::GemmSegment> test_segments(bool repeated) {
  if (!repeated) return {{0, 5, 1}, {5, 1, 3}, {6, 7, 0}, {13, 3, 2}};
  return {{0, 4, 0}, {4, 3, 1}, {7, 5, 0}, {12, 1, 2}, {13, 3, 1}};
}
constexpr int kGroupedRows = 18;  // rows 16, 17 belong to no segment

}  // namespace loom::test
