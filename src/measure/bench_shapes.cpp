// Reading the kernel benchmarks' problem lists.
#include "measure/bench_shapes.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.hpp"

namespace cnnscale::measure {

namespace {

constexpr int64_t kMaxExtent = 0x7fffffff;
// Each operand is generated on the host as floats and copied to the device whole: past 2^31
// elements (8 GiB of floats) a problem is refused rather than left to fail an allocation.
constexpr int64_t kMaxOperandElements = int64_t{1} << 31;

void check_operand(const std::string& where, const char* name, int64_t a, int64_t b, int64_t c = 1, int64_t d = 1) {
  const double n = static_cast<double>(a) * static_cast<double>(b) * static_cast<double>(c) * static_cast<double>(d);
  if (n > static_cast<double>(kMaxOperandElements))
    throw_config("{}: operand {} has {:.3g} elements, above the 2^31 a benchmark generates", where, name, n);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t a = item.find_first_not_of(" \t\r"), b = item.find_last_not_of(" \t\r");
    out.push_back(a == std::string::npos ? "" : item.substr(a, b - a + 1));
  }
  return out;
}

int64_t to_int(const std::string& field, const std::string& where, const std::string& column, int64_t min) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(field, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != field.size())
    throw_config("{}: {}: '{}' is not an integer (or not one below 2^63)", where, column, field);
  if (v < min) throw_config("{}: {}: {} is below {}", where, column, v, min);
  if (v > kMaxExtent)
    throw_config("{}: {}: {} is above {} (cuBLAS and cuDNN take int extents)", where, column, v, kMaxExtent);
  return v;
}

bool to_flag(const std::string& field, const std::string& where, const std::string& column) {
  if (field == "1") return true;
  if (field == "0") return false;
  throw_config("{}: {}: expected 1 or 0, got '{}'", where, column, field);
}

GemmProblem gemm_row(const std::vector<std::string>& f, const std::string& where, bool short_ok) {
  if (f.size() != 5 && !(short_ok && f.size() == 3))
    throw_config("{}: expected m,n,k,trans_a,trans_b{}, got {} field(s)", where, short_ok ? " (or m,n,k)" : "",
                 f.size());
  GemmProblem p;
  p.m = to_int(f[0], where, "m", 1);
  p.n = to_int(f[1], where, "n", 1);
  p.k = to_int(f[2], where, "k", 1);
  if (f.size() == 5) {
    p.trans_a = to_flag(f[3], where, "trans_a");
    p.trans_b = to_flag(f[4], where, "trans_b");
  }
  check_operand(where, "A", p.m, p.k);
  check_operand(where, "B", p.k, p.n);
  check_operand(where, "C", p.m, p.n);
  return p;
}

ConvProblem conv_row(const std::vector<std::string>& f, const std::string& where) {
  if (f.size() != 11)
    throw_config("{}: expected w,h,c,n,k,s,r,pad_w,pad_h,stride_w,stride_h, got {} field(s)", where, f.size());
  ConvProblem p;
  p.w = to_int(f[0], where, "w", 1);
  p.h = to_int(f[1], where, "h", 1);
  p.c = to_int(f[2], where, "c", 1);
  p.n = to_int(f[3], where, "n", 1);
  p.k = to_int(f[4], where, "k", 1);
  p.s = to_int(f[5], where, "s", 1);
  p.r = to_int(f[6], where, "r", 1);
  p.pad_w = to_int(f[7], where, "pad_w", 0);
  p.pad_h = to_int(f[8], where, "pad_h", 0);
  p.stride_w = to_int(f[9], where, "stride_w", 1);
  p.stride_h = to_int(f[10], where, "stride_h", 1);
  if (p.w + 2 * p.pad_w < p.s || p.h + 2 * p.pad_h < p.r)
    throw_config("{}: the {}x{} filter does not fit the padded {}x{} input", where, p.r, p.s, p.h + 2 * p.pad_h,
                 p.w + 2 * p.pad_w);
  check_operand(where, "x", p.n, p.c, p.h, p.w);
  check_operand(where, "w", p.k, p.c, p.r, p.s);
  check_operand(where, "y", p.n, p.k, p.out_h(), p.out_w());
  return p;
}

// Calls row(fields, "file:line") for each data row, after checking the header row is `header`.
template <typename Row>
void read_rows(const std::string& path, const std::string& header, Row&& row) {
  std::ifstream in(path);
  if (!in) throw_config("{}: cannot read the shape list", path);
  std::string line;
  int line_no = 0;
  bool seen_header = false;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const std::string where = fmt::format("{}:{}", path, line_no);
    if (!seen_header) {
      if (line != header) throw_config("{}: expected the header row '{}', got '{}'", where, header, line);
      seen_header = true;
      continue;
    }
    row(split(line), where);
  }
  if (!seen_header) throw_config("{}: no header row '{}'", path, header);
}

}  // namespace

std::string bench_shape_file(const std::string& kind, const std::string& set) {
  namespace fs = std::filesystem;
  const fs::path rel = fs::path("data") / "bench" / fmt::format("{}-{}.csv", kind, set);
  std::vector<fs::path> roots{"."};
#ifdef CNNSCALE_SOURCE_DIR
  roots.emplace_back(CNNSCALE_SOURCE_DIR);
#endif
  std::string tried;
  std::error_code ec;
  for (const fs::path& root : roots) {
    const fs::path p = root / rel;
    if (fs::is_regular_file(p, ec)) return p.lexically_normal().string();
    tried += (tried.empty() ? "" : ", ") + p.string();
  }
  throw_config("--set {}: no {} shape list (tried {})", set, kind, tried);
}

std::vector<GemmProblem> read_gemm_shapes(const std::string& path) {
  std::vector<GemmProblem> out;
  read_rows(path, "m,n,k,trans_a,trans_b", [&](const std::vector<std::string>& f, const std::string& where) {
    out.push_back(gemm_row(f, where, false));
  });
  if (out.empty()) throw_config("{}: no problems listed", path);
  return out;
}

static double to_fraction(const std::string& field, const std::string& where) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(field, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != field.size() || !(v >= 0.0 && v < 1.0))
    throw_config("{}: sparsity: expected a fraction of zeros in [0, 1), got '{}'", where, field);
  return v;
}

static SparseProblem sparse_problem(int64_t m, int64_t n, int64_t k, double sparsity, const std::string& where) {
  SparseProblem p{m, n, k, sparsity};
  check_operand(where, "A (dense baseline)", m, k);
  check_operand(where, "B", k, n);
  check_operand(where, "C", m, n);
  return p;
}

// hidden,batch,time_steps,cell
static RnnProblem rnn_row(const std::vector<std::string>& f, const std::string& where) {
  if (f.size() != 4) throw_config("{}: expected hidden,batch,time_steps,cell, got {} field(s)", where, f.size());
  RnnProblem p;
  p.hidden = to_int(f[0], where, "hidden", 1);
  p.batch = to_int(f[1], where, "batch", 1);
  p.time_steps = to_int(f[2], where, "time_steps", 1);
  p.cell = parse_rnn_cell(f[3], where);
  check_operand(where, "x", p.time_steps, p.batch, p.hidden);
  check_operand(where, "weights", 2 * p.gates(), p.hidden, p.hidden);
  return p;
}

std::vector<RnnProblem> read_rnn_shapes(const std::string& path) {
  std::vector<RnnProblem> out;
  read_rows(path, "hidden,batch,time_steps,cell",
            [&](const std::vector<std::string>& f, const std::string& where) { out.push_back(rnn_row(f, where)); });
  if (out.empty()) throw_config("{}: no problems listed", path);
  return out;
}

RnnProblem parse_rnn_shape(const std::string& text, const std::string& what) {
  return rnn_row(split(text), what);
}

std::string rnn_label(const RnnProblem& p) {
  return fmt::format("{} h={} n={} t={}", rnn_cell_name(p.cell), p.hidden, p.batch, p.time_steps);
}

std::vector<SparseProblem> read_sparse_shapes(const std::string& path) {
  std::vector<SparseProblem> out;
  read_rows(path, "m,n,k,trans_a,trans_b,sparsity", [&](const std::vector<std::string>& f, const std::string& where) {
    if (f.size() != 6) throw_config("{}: expected m,n,k,trans_a,trans_b,sparsity, got {} field(s)", where, f.size());
    if (to_flag(f[3], where, "trans_a") || to_flag(f[4], where, "trans_b"))
      throw_config("{}: bench spmm runs untransposed problems (as DeepBench's lists)", where);
    out.push_back(sparse_problem(to_int(f[0], where, "m", 1), to_int(f[1], where, "n", 1), to_int(f[2], where, "k", 1),
                                 to_fraction(f[5], where), where));
  });
  if (out.empty()) throw_config("{}: no problems listed", path);
  return out;
}

SparseProblem parse_sparse_shape(const std::string& text, const std::string& what) {
  const std::vector<std::string> f = split(text);
  if (f.size() != 4) throw_config("{}: expected m,n,k,sparsity, got {} field(s)", what, f.size());
  return sparse_problem(to_int(f[0], what, "m", 1), to_int(f[1], what, "n", 1), to_int(f[2], what, "k", 1),
                        to_fraction(f[3], what), what);
}

std::vector<ConvProblem> read_conv_shapes(const std::string& path) {
  std::vector<ConvProblem> out;
  read_rows(path, "w,h,c,n,k,s,r,pad_w,pad_h,stride_w,stride_h",
            [&](const std::vector<std::string>& f, const std::string& where) { out.push_back(conv_row(f, where)); });
  if (out.empty()) throw_config("{}: no problems listed", path);
  return out;
}

GemmProblem parse_gemm_shape(const std::string& text, const std::string& what) {
  return gemm_row(split(text), what, true);
}

ConvProblem parse_conv_shape(const std::string& text, const std::string& what) {
  return conv_row(split(text), what);
}

ConvSweepBase parse_sweep_base(const std::string& text, const std::string& what) {
  const std::vector<std::string> f = split(text);
  if (f.size() != 5 && f.size() != 6) throw_config("{}: expected b,i,f,k,s[,c], got '{}'", what, text);
  ConvSweepBase b;
  b.b = to_int(f[0], what, "b", 1);
  b.i = to_int(f[1], what, "i", 1);
  b.f = to_int(f[2], what, "f", 1);
  b.k = to_int(f[3], what, "k", 1);
  b.s = to_int(f[4], what, "s", 1);
  if (f.size() == 6) b.c = to_int(f[5], what, "c", 1);
  if (b.k > b.i) throw_config("{}: kernel {} is larger than the input {}", what, b.k, b.i);
  return b;
}

std::vector<int64_t> default_sweep_values(const std::string& axis) {
  if (axis == "b") return {32, 64, 128, 192, 256, 384, 512};
  if (axis == "i") return {32, 64, 96, 128, 160, 192, 224, 256};
  if (axis == "f") return {32, 64, 96, 128, 192, 256, 384, 512};
  if (axis == "k") return {1, 3, 5, 7, 9, 11, 13, 15};
  if (axis == "s") return {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  throw_config("--sweep '{}': expected b, i, f, k or s (batch, input size, filters, kernel, stride)", axis);
}

std::vector<ConvProblem> conv_sweep(const std::string& axis, const std::vector<int64_t>& values,
                                    const ConvSweepBase& base, const std::string& what) {
  default_sweep_values(axis);  // the axis check
  std::vector<ConvProblem> out;
  for (int64_t v : values) {
    if (v < 1) throw_config("{} {}: values must be >= 1, got {}", what, axis, v);
    ConvSweepBase t = base;
    (axis == "b" ? t.b : axis == "i" ? t.i : axis == "f" ? t.f : axis == "k" ? t.k : t.s) = v;
    if (t.k > t.i) throw_config("{} {}: kernel {} is larger than the input {}", what, axis, t.k, t.i);
    ConvProblem p;
    p.n = t.b, p.c = t.c, p.h = t.i, p.w = t.i, p.k = t.f, p.r = t.k, p.s = t.k, p.stride_h = t.s, p.stride_w = t.s;
    out.push_back(p);
  }
  return out;
}

int64_t sweep_value(const std::string& axis, const ConvProblem& p) {
  return axis == "b" ? p.n : axis == "i" ? p.h : axis == "f" ? p.k : axis == "k" ? p.r : p.stride_h;
}

std::string gemm_label(const GemmProblem& p) {
  return fmt::format("m={} n={} k={} {}{}", p.m, p.n, p.k, p.trans_a ? 'T' : 'N', p.trans_b ? 'T' : 'N');
}

std::string sparse_label(const SparseProblem& p) {
  return fmt::format("m={} n={} k={} {:g}% zeros", p.m, p.n, p.k, 100 * p.sparsity);
}

std::string conv_label(const ConvProblem& p) {
  std::string pad = p.pad_h == p.pad_w ? fmt::format("{}", p.pad_h) : fmt::format("{}x{}", p.pad_h, p.pad_w);
  std::string stride =
      p.stride_h == p.stride_w ? fmt::format("{}", p.stride_h) : fmt::format("{}x{}", p.stride_h, p.stride_w);
  return fmt::format("n={} c={} {}x{} k={} {}x{}/{} pad {}", p.n, p.c, p.h, p.w, p.k, p.r, p.s, stride, pad);
}

}  // namespace cnnscale::measure
