// The public API's names, read from its headers, for the tests that must cover all of it
// (test_op_table.cpp, test_error_inputs.cpp). Needs TAPEGRAD_SOURCE_DIR.
#pragma once
#include <doctest/doctest.h>

#include <cctype>
#include <fstream>
#include <set>
#include <string>

namespace tgtest {

// The name in a line "Type name(...": a function declared at namespace scope (the headers
// indent everything else). Empty for any other line. (No std::regex: g++ 12 warns inside it
// under the sanitizers.)
inline std::string declared_name(const std::string& line) {
  if (line.empty() || !std::isalpha(static_cast<unsigned char>(line[0]))) return "";
  const size_t paren = line.find('(');
  if (paren == std::string::npos) return "";
  const size_t space = line.rfind(' ', paren);
  if (space == std::string::npos) return "";
  std::string name = line.substr(space + 1, paren - space - 1);
  if (name.empty()) return "";
  for (char c : name)
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '_'))
      return "";
  return name;
}

// The functions the public op headers (those ops/ops.h includes) declare at namespace scope.
inline std::set<std::string> public_ops() {
  const std::string root = TAPEGRAD_SOURCE_DIR;
  std::ifstream all(root + "/ops/ops.h");
  REQUIRE(all.good());
  std::set<std::string> names;
  const std::string include = "#include \"ops/";
  std::string line;
  while (std::getline(all, line)) {
    if (line.rfind(include, 0) != 0) continue;
    const std::string header = line.substr(10, line.find('"', 10) - 10);  // after #include "
    std::ifstream in(root + "/" + header);  // NOLINT(performance-inefficient-string-concatenation)
    REQUIRE(in.good());
    std::string l;
    bool in_detail = false;  // namespace detail { ... }: helpers, not ops
    while (std::getline(in, l)) {
      if (l.rfind("namespace detail", 0) == 0) in_detail = true;
      if (l.rfind("}  // namespace detail", 0) == 0) in_detail = false;
      const std::string name = declared_name(l);
      if (!name.empty() && !in_detail) names.insert(name);
    }
  }
  return names;
}

// The member functions class Tensor declares (core/tensor.h): lines indented by two spaces,
// "Type name(" with Type one of the member return types it uses.
inline std::set<std::string> tensor_methods() {
  std::ifstream in(std::string(TAPEGRAD_SOURCE_DIR) + "/core/tensor.h");
  REQUIRE(in.good());
  std::set<std::string> names;
  std::string l;
  bool in_class = false;
  while (std::getline(in, l)) {
    if (l.rfind("class Tensor {", 0) == 0) in_class = true;
    if (in_class && (l.rfind("};", 0) == 0 || l.rfind(" private:", 0) == 0)) break;
    if (!in_class || l.rfind("  ", 0) != 0 || l.size() < 3 || l[2] == ' ') continue;
    if (l.find("static ") != std::string::npos || l.find("explicit ") != std::string::npos)
      continue;  // constructors and factories, not methods of a tensor
    std::string rest = l.substr(2);
    if (rest.rfind("template", 0) == 0 || rest.rfind("//", 0) == 0) continue;
    if (rest.rfind("const ", 0) == 0) rest = rest.substr(6);  // "const Shape& sizes()"
    const std::string name = declared_name(rest);
    if (!name.empty()) names.insert(name);
  }
  return names;
}

}  // namespace tgtest
