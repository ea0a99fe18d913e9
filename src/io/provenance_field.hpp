// Provenance (io/provenance.hpp) as a field of a result schema: the "provenance" object every
// product's JSON carries, written and read by provenance.cpp's one JSON form, its fields listed for
// the README check.
#pragma once
#include <vector>

#include "io/provenance.hpp"
#include "io/result_schema.hpp"

namespace cnnscale {

// The fields of the "provenance" object, as provenance_json writes them.
std::vector<FieldInfo> provenance_field_infos();

namespace schema_detail {
template <>
struct Codec<Provenance> {
  static constexpr FieldType type = FieldType::Object;
  static nlohmann::json to(const Provenance& p) { return provenance_json(p); }
  static Provenance from(const nlohmann::json& j, const std::string& file, const std::string& path) {
    return provenance_from_json(j, file + ": " + path);
  }
  static std::vector<FieldInfo> infos() { return provenance_field_infos(); }
};
}  // namespace schema_detail

}  // namespace cnnscale
