// Reading one YAML document from user text, safely.
//
// yaml-cpp's LoadAll never returns on some malformed input (a stray `}` or `]` after
// the first document makes every further call yield an empty document without
// consuming anything), which would let one bad spec hang a server thread. This
// reader counts documents with a bound and a progress check, then loads the first.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <string_view>

namespace trainyard {

struct YamlText {
  YAML::Node first;   // the first document (null when there is none)
  int documents = 0;  // how many the text holds, up to kMaxYamlDocuments + 1
};

inline constexpr int kMaxYamlDocuments = 1000;

// Throws YAML::Exception (with the mark of the problem) on invalid YAML, including
// text after a document that does not start another one.
YamlText LoadYamlText(std::string_view text);

// "2 YAML documents", or "more than 1000 YAML documents" at the bound.
std::string DocumentCount(const YamlText& yaml);

}  // namespace trainyard
