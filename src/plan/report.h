// The plan as text (a ranked table, rejections, assumptions) or as JSON for scripts.
#pragma once
#include <string>

#include "plan/planner.h"

namespace loom::plan {

struct ReportOptions {
  std::string config_path;  // named in the header
  std::string note;         // plan_model()'s precision note, if any
  int top = 15;             // valid layouts shown in the text table
  int rejected_shown = 8;   // rejections of each kind shown in the text
};

std::string format_text(const Plan& p, const ReportOptions& o);
// Every valid and rejected entry; sizes in bytes, times in seconds.
std::string format_json(const Plan& p, const ReportOptions& o);

}  // namespace loom::plan
