// The schema of a JSON result file: one table per struct listing each member with its JSON name,
// type, unit, whether every file has it and what it means. The same table writes the struct as JSON
// and reads it back, so a field added to a product is one member and one row, and results/README.md
// is checked against the tables (result_schema_tables lists them all, training's included).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "io/run_summary.hpp"

namespace cnnscale {

enum class FieldType { Text, Count, Number, Flag, TextList, CountList, NumberList, Object, ObjectList };
std::string_view field_type_name(FieldType type);  // "text", "count", ..., "object list"

// Required: every file of the format has it (null allowed), and the reader refuses one without it.
// Optional: absent in some files (another scenario, an older version, a setting not given).
enum class Presence { Required, Optional };
// The schema tables' shorthand for the two (`using namespace schema_presence;` in a table's file).
namespace schema_presence {
inline constexpr Presence R = Presence::Required;
inline constexpr Presence O = Presence::Optional;
}  // namespace schema_presence

struct FieldInfo {
  std::string_view name;
  FieldType type = FieldType::Text;
  std::string_view unit;  // "" for texts, counts without a unit and ratios
  Presence presence = Presence::Optional;
  std::string_view description;
  // Object and ObjectList: the fields of the object (of each element).
  std::vector<FieldInfo> (*nested)() = nullptr;
};

// One documented table: a product's fields under its name ("infer", "infer.batches[]", ...).
struct SchemaTable {
  std::string_view product;  // "training", "inference", ...
  std::string name;
  std::vector<FieldInfo> fields;
};
// Every table of every result product (training's summary figures included), for the README check.
std::vector<SchemaTable> result_schema_tables();

using CountFigure = Figure<int64_t>;
using FlagFigure = Figure<bool>;
using TextListFigure = Figure<std::vector<std::string>>;
using CountListFigure = Figure<std::vector<int64_t>>;
using NumberListFigure = Figure<std::vector<double>>;

// A number that may be unknown: null when `v` is empty.
template <class Optional>
NumberFigure number_or_null(const Optional& v) {
  return v ? NumberFigure(static_cast<double>(*v)) : NumberFigure::null();
}
inline TextFigure text_or_null(const std::string& v) { return v.empty() ? TextFigure::null() : TextFigure(v); }

// A row of a struct's table: the field and how its member is written and read.
template <class S>
struct SchemaField {
  FieldInfo info;
  void (*write)(const S& s, const FieldInfo& f, nlohmann::json& object);
  // `object` is the JSON object holding the field; `file` and `path` name it in errors.
  void (*read)(const nlohmann::json& object, const FieldInfo& f, S& s, const std::string& file,
               const std::string& path);
};

// A struct with a schema: `static std::span<const SchemaField<S>> fields()`.
template <class S>
concept HasSchema = requires { { S::fields() } -> std::convertible_to<std::span<const SchemaField<S>>>; };

template <class S>
nlohmann::json to_json_object(const S& s);
template <class S>
S from_json_object(const nlohmann::json& j, const std::string& file, const std::string& path = "");
template <HasSchema S>
std::vector<FieldInfo> field_infos() {
  std::vector<FieldInfo> out;
  for (const SchemaField<S>& f : S::fields()) out.push_back(f.info);
  return out;
}

namespace schema_detail {

inline std::string child(const std::string& path, std::string_view name) {
  return path.empty() ? std::string(name) : path + "." + std::string(name);
}
[[noreturn]] inline void wrong_type(const std::string& file, const std::string& path, const char* expected) {
  throw_config("{}: \"{}\" is not {}", file, path, expected);
}

template <class T>
struct Codec;

template <>
struct Codec<std::string> {
  static constexpr FieldType type = FieldType::Text;
  static nlohmann::json to(const std::string& v) { return v; }
  static std::string from(const nlohmann::json& j, const std::string& file, const std::string& path) {
    if (!j.is_string()) wrong_type(file, path, "text");
    return j.get<std::string>();
  }
};
template <>
struct Codec<int64_t> {
  static constexpr FieldType type = FieldType::Count;
  static nlohmann::json to(int64_t v) { return v; }
  static int64_t from(const nlohmann::json& j, const std::string& file, const std::string& path) {
    if (!j.is_number_integer()) wrong_type(file, path, "a count (a JSON integer)");
    return j.get<int64_t>();
  }
};
// Numbers: a non-finite value is written as JSON's null (nlohmann dumps it so) and read back as null.
template <>
struct Codec<double> {
  static constexpr FieldType type = FieldType::Number;
  static nlohmann::json to(double v) { return v; }
  static double from(const nlohmann::json& j, const std::string& file, const std::string& path) {
    if (!j.is_number()) wrong_type(file, path, "a number");
    return j.get<double>();
  }
};
template <>
struct Codec<bool> {
  static constexpr FieldType type = FieldType::Flag;
  static nlohmann::json to(bool v) { return v; }
  static bool from(const nlohmann::json& j, const std::string& file, const std::string& path) {
    if (!j.is_boolean()) wrong_type(file, path, "true or false");
    return j.get<bool>();
  }
};
template <HasSchema S>
struct Codec<S> {
  static constexpr FieldType type = FieldType::Object;
  static nlohmann::json to(const S& v) { return to_json_object(v); }
  static S from(const nlohmann::json& j, const std::string& file, const std::string& path) {
    return from_json_object<S>(j, file, path);
  }
};
// A list's element that may be null (a NaN of a series): a Figure, null where it holds none.
template <class T>
struct Codec<Figure<T>> {
  static constexpr FieldType type = Codec<T>::type;
  static nlohmann::json to(const Figure<T>& v) { return v.has_value() ? Codec<T>::to(v.value()) : nlohmann::json(); }
  static Figure<T> from(const nlohmann::json& j, const std::string& file, const std::string& path) {
    return j.is_null() ? Figure<T>::null() : Figure<T>(Codec<T>::from(j, file, path));
  }
};
template <class E>
struct Codec<std::vector<E>> {
  static constexpr FieldType type = Codec<E>::type == FieldType::Text     ? FieldType::TextList
                                    : Codec<E>::type == FieldType::Count  ? FieldType::CountList
                                    : Codec<E>::type == FieldType::Number ? FieldType::NumberList
                                                                          : FieldType::ObjectList;
  static_assert(Codec<E>::type != FieldType::Flag, "no list of flags");
  static nlohmann::json to(const std::vector<E>& v) {
    nlohmann::json out = nlohmann::json::array();
    for (const E& e : v) out.push_back(Codec<E>::to(e));
    return out;
  }
  static std::vector<E> from(const nlohmann::json& j, const std::string& file, const std::string& path) {
    if (!j.is_array()) wrong_type(file, path, "a list");
    std::vector<E> out;
    for (size_t i = 0; i < j.size(); ++i) out.push_back(Codec<E>::from(j[i], file, path + "[" + std::to_string(i) + "]"));
    return out;
  }
};

template <class M>
struct MemberOf;
template <class S, class T>
struct MemberOf<Figure<T> S::*> {
  using Struct = S;
  using Value = T;
};

template <class T>
struct ElementOf {
  using type = T;
};
template <class E>
struct ElementOf<std::vector<E>> {
  using type = E;
};

// The fields of an object or of a list's objects; nullptr for other types.
template <class T>
std::vector<FieldInfo> (*nested_infos())() {
  using E = typename ElementOf<T>::type;
  if constexpr (HasSchema<E>)
    return &field_infos<E>;
  else if constexpr (requires { Codec<E>::infos(); })
    return &Codec<E>::infos;
  else
    return nullptr;
}

}  // namespace schema_detail

// The row of member `Member` (a Figure<T> of S): its type follows from T (std::string: text,
// int64_t: count, double: number, bool: flag, vectors of those: lists, a struct with a schema:
// object), so no row can pair a type with a member of another.
template <auto Member>
SchemaField<typename schema_detail::MemberOf<decltype(Member)>::Struct> field(std::string_view name,
                                                                                std::string_view unit,
                                                                                Presence presence,
                                                                                std::string_view description) {
  using S = typename schema_detail::MemberOf<decltype(Member)>::Struct;
  using T = typename schema_detail::MemberOf<decltype(Member)>::Value;
  using C = schema_detail::Codec<T>;
  return {FieldInfo{name, C::type, unit, presence, description, schema_detail::nested_infos<T>()},
          [](const S& s, const FieldInfo& f, nlohmann::json& object) {
            const Figure<T>& v = s.*Member;
            if (v.has_value())
              object[std::string(f.name)] = C::to(v.value());
            else if (v.is_null())
              object[std::string(f.name)] = nullptr;
          },
          [](const nlohmann::json& object, const FieldInfo& f, S& s, const std::string& file, const std::string& path) {
            const auto it = object.find(std::string(f.name));
            if (it == object.end()) {
              if (f.presence == Presence::Required) throw_config("{}: missing \"{}\"", file, schema_detail::child(path, f.name));
              return;
            }
            s.*Member = it->is_null() ? Figure<T>::null() : Figure<T>(C::from(*it, file, schema_detail::child(path, f.name)));
          }};
}

template <class S>
nlohmann::json to_json_object(const S& s) {
  nlohmann::json out = nlohmann::json::object();
  for (const SchemaField<S>& f : S::fields()) f.write(s, f.info, out);
  return out;
}

// Fields the table lacks (written by a later version) are skipped.
template <class S>
S from_json_object(const nlohmann::json& j, const std::string& file, const std::string& path) {
  if (!j.is_object()) schema_detail::wrong_type(file, path.empty() ? "(the file)" : path, "an object");
  S s;
  for (const SchemaField<S>& f : S::fields()) f.read(j, f.info, s, file, path);
  return s;
}

}  // namespace cnnscale
