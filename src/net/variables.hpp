// Network-file variables: `${name}` and integer expressions such as `${filters*4}` inside scalar
// values. Substitution rewrites scalars in place so every node keeps its file line and column
// (yaml-cpp keeps a node's mark when a string is assigned to it, but not when nodes are copied).
#pragma once
#include <map>
#include <string>

#include "core/config.hpp"

namespace cnnscale::net {

// Variables visible at one point of the network file: name -> scalar text.
class VarScope {
 public:
  void set(const std::string& name, const std::string& value) { values_[name] = value; }
  const std::string* find(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() ? nullptr : &it->second;
  }
  std::string names() const;  // "a, b, c" for error messages

 private:
  std::map<std::string, std::string> values_;
};

// Rewrites every `${expr}` of a network file's text as `$(expr)` before YAML parsing. Braces are
// syntax inside YAML flow collections, so `{num_output: ${classes}}` would not parse; parentheses
// are plain characters there. Same length, so every line and column stays as in the file.
std::string protect_references(const std::string& text);

// True when `text` contains a `${...}` (or protected `$(...)`) reference.
bool has_reference(const std::string& text);

// Replace every `${expr}` (or `$(expr)`) in `text`. `expr` is a variable name (its text is substituted as is) or
// an integer expression over integer variables and literals with + - * / % and parentheses.
// Errors name `where` (file:line:col and key path).
std::string substitute(const std::string& text, const VarScope& scope, const ConfigNode& where);

// Substitute in every scalar below `node` (maps, sequences), in place. Map keys are left alone.
void substitute_in_place(const ConfigNode& node, const VarScope& scope);

// Overwrite a scalar's text without losing its mark.
void set_scalar(const ConfigNode& node, const std::string& text);

}  // namespace cnnscale::net
