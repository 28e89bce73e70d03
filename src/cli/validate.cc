#include "cli/validate.h"

#include <sys/stat.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/app.h"
#include "core/job_text.h"

namespace trainyard::cli {
namespace {

struct FileText {
  std::string text;
  std::string error;  // set when the file could not be read
};

FileText ReadSpecFile(const std::string& path, std::istream& in) {
  FileText f;
  auto slurp = [&](std::istream& s) {
    // Read at most one byte past the limit so an oversized input is reported, not loaded.
    std::string buf(SpecLimits::kMaxSpecBytes + 1, '\0');
    s.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    buf.resize(static_cast<size_t>(s.gcount()));
    f.text = std::move(buf);
  };
  if (path == "-") {
    slurp(in);
    return f;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    f.error = "cannot read: " + std::string(std::strerror(errno));
    return f;
  }
  if (S_ISDIR(st.st_mode)) {
    f.error = "is a directory; give a spec file";
    return f;
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    f.error = "cannot read: " + std::string(std::strerror(errno));
    return f;
  }
  slurp(file);
  return f;
}

nlohmann::ordered_json DiagnosticJson(const Diagnostic& d) {
  return {{"file", d.file}, {"line", d.line}, {"field", d.field}, {"message", d.message}};
}

}  // namespace

int RunValidate(const ValidateOptions& options, std::istream& in, std::ostream& out,
                std::ostream& err) {
  const bool json = options.output == "json";
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  bool all_ok = true;
  bool first = true;
  for (const std::string& path : options.files) {
    const std::string name = path == "-" ? "<stdin>" : path;
    FileText f = ReadSpecFile(path, in);
    SpecParseResult r;
    if (!f.error.empty()) {
      r.errors.push_back(Diagnostic{name, 0, "", f.error});
    } else {
      r = ParseJobText(f.text, name);
    }
    all_ok = all_ok && r.ok();
    if (json) {
      nlohmann::ordered_json item;
      item["file"] = name;
      item["valid"] = r.ok();
      if (r.ok()) item["spec"] = SpecToJson(RedactSecrets(*r.spec));
      auto& errors = item["errors"] = nlohmann::ordered_json::array();
      for (const auto& d : r.errors) errors.push_back(DiagnosticJson(d));
      auto& warnings = item["warnings"] = nlohmann::ordered_json::array();
      for (const auto& d : r.warnings) warnings.push_back(DiagnosticJson(d));
      results.push_back(std::move(item));
      continue;
    }
    for (const auto& d : r.warnings) err << "warning: " << d.ToString() << "\n";
    for (const auto& d : r.errors) err << d.ToString() << "\n";
    if (r.ok()) {
      if (options.files.size() > 1) {
        if (!first) out << "---\n";
        out << "# " << name << "\n";
      }
      out << SpecToYaml(RedactSecrets(*r.spec));  // its output ends up in CI logs
      first = false;
    }
  }
  if (json) out << results.dump(2) << "\n";
  return all_ok ? kExitOk : kExitUsage;
}

void AddValidateCommand(CLI::App& app, ValidateOptions& options, int& exit_code, std::ostream& out,
                        std::ostream& err) {
  CLI::App* cmd = app.add_subcommand(
      "validate",
      "Check job specs (YAML, JSON or #SBATCH scripts) and print them normalised.\n"
      "Exit status 2 when any file is invalid; each problem is printed as\n"
      "FILE:LINE: FIELD: what is wrong and what would be valid.");
  cmd->add_option("files", options.files, "Spec files; - reads standard input")->required();
  cmd->add_option("-o,--output", options.output, "Output format")
      ->check(CLI::IsMember({"yaml", "json"}))
      ->capture_default_str();
  cmd->callback(
      [&options, &exit_code, &out, &err] { exit_code = RunValidate(options, std::cin, out, err); });
}

}  // namespace trainyard::cli
