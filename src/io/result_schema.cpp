// Names of the field types and the list of every result product's tables (see result_schema.hpp).
#include "io/result_schema.hpp"

#include "io/allreduce_results.hpp"
#include "io/calibration_results.hpp"
#include "io/infer_results.hpp"
#include "io/kernel_bench_results.hpp"
#include "io/kernel_profile_results.hpp"
#include "io/provenance_field.hpp"
#include "io/summary_schema.hpp"

namespace cnnscale {

std::string_view field_type_name(FieldType type) {
  switch (type) {
    case FieldType::Text: return "text";
    case FieldType::Count: return "count";
    case FieldType::Number: return "number";
    case FieldType::Flag: return "flag";
    case FieldType::TextList: return "text list";
    case FieldType::CountList: return "count list";
    case FieldType::NumberList: return "number list";
    case FieldType::Object: return "object";
    case FieldType::ObjectList: return "object list";
  }
  return "?";
}

std::vector<FieldInfo> provenance_field_infos() {
  using F = FieldType;
  const Presence R = Presence::Required;
  return {{"version", F::Text, "", R, "cnnscale's version"},
          {"git_describe", F::Text, "", R, "the source's git describe (null: not built from git)"},
          {"command_line", F::TextList, "", R, "the command line as given, the program first"},
          {"start_time", F::Text, "", R, "UTC start"},
          {"end_time", F::Text, "", R, "UTC end"},
          {"hosts", F::TextList, "", R, "every rank's host, each once, rank 0's first"},
          {"resumed_at", F::TextList, "", Presence::Optional, "UTC start of each resume from a checkpoint, in order"}};
}

namespace {

// Training's summary figures as fields: every figure may be absent in a file of another version.
template <class Summary>
std::vector<FieldInfo> summary_infos(std::span<const FigureField<Summary>> fields) {
  std::vector<FieldInfo> out;
  for (const SummaryField& f : fields) {
    const FieldType type = f.kind == FigureKind::Text    ? FieldType::Text
                           : f.kind == FigureKind::Count ? FieldType::Count
                                                         : FieldType::Number;
    out.push_back({f.name, type, f.unit, Presence::Optional, "", nullptr});
  }
  return out;
}

// A table and, under "<name>.<field>" ("[]" for lists), the tables of its objects.
void add_with_nested(std::vector<SchemaTable>& out, std::string_view product, const std::string& name,
                     std::vector<FieldInfo> fields) {
  out.push_back({product, name, fields});
  for (const FieldInfo& f : fields)
    if (f.nested)
      add_with_nested(out, product, name + "." + std::string(f.name) + (f.type == FieldType::ObjectList ? "[]" : ""),
                      f.nested());
}

}  // namespace

std::vector<SchemaTable> result_schema_tables() {
  std::vector<SchemaTable> out;
  add_with_nested(out, "training", "summary", summary_infos(run_summary_fields()));
  add_with_nested(out, "training", "ranks[]", summary_infos(rank_summary_fields()));
  add_with_nested(out, "inference", "infer", field_infos<InferResult>());
  add_with_nested(out, "allreduce", "allreduce", field_infos<AllreduceResult>());
  add_with_nested(out, "kernels", "bench", field_infos<KernelBenchSummary>());
  add_with_nested(out, "kernel_profile", "kernel_profile", field_infos<KernelProfileSummary>());
  add_with_nested(out, "calibration", "calibration", field_infos<CalibrationResult>());
  return out;
}

}  // namespace cnnscale
