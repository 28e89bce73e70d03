#include "core/yaml_text.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>

#include <sstream>
#include <string>

namespace trainyard {
namespace {

// Sees only where documents start: enough to count them and to notice the parser
// standing still.
class DocumentCounter : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    stuck_ = count_ > 0 && mark.pos == last_.pos;
    last_ = mark;
    ++count_;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

  int count() const { return count_; }
  bool stuck() const { return stuck_; }
  const YAML::Mark& last() const { return last_; }

 private:
  int count_ = 0;
  bool stuck_ = false;
  YAML::Mark last_ = YAML::Mark::null_mark();
};

YamlText LoadUnguarded(std::string_view text) {
  const std::string copy(text);
  YamlText out;
  {
    std::istringstream in(copy);
    YAML::Parser parser(in);
    DocumentCounter counter;
    while (counter.count() <= kMaxYamlDocuments && parser.HandleNextDocument(counter)) {
      if (counter.stuck()) {
        throw YAML::ParserException(counter.last(), "unexpected text after the end of a document");
      }
    }
    out.documents = counter.count();
  }
  if (out.documents > 0) out.first = YAML::Load(copy);
  return out;
}

}  // namespace

YamlText LoadYamlText(std::string_view text) {
  try {
    return LoadUnguarded(text);
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp's own message for this is only "bad file".
    throw YAML::ParserException(
        e.mark, "nested more than " + std::to_string(e.depth() - 1) + " levels deep");
  }
}

std::string DocumentCount(const YamlText& yaml) {
  if (yaml.documents > kMaxYamlDocuments) {
    return "more than " + std::to_string(kMaxYamlDocuments) + " YAML documents";
  }
  return std::to_string(yaml.documents) + " YAML document" + (yaml.documents == 1 ? "" : "s");
}

}  // namespace trainyard
