// `fittrain help TOPIC`: short guides to what spans commands (how memory is planned, which
// data each task reads, how several devices are used, what a checkpoint holds), beside the
// per-command help (`fittrain help train`). Each names the flags and docs to read next.
#pragma once
#include <string>
#include <vector>

namespace ft {

struct HelpTopic {
  const char* name;
  const char* summary;  // one line, for the list
  const char* text;     // the guide
};

const std::vector<HelpTopic>& help_topics();
// The topic named `name`, or null.
const HelpTopic* find_help_topic(const std::string& name);
// "Topics (fittrain help TOPIC):" and one line a topic.
std::string help_topic_list();

}  // namespace ft
