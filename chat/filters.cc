// The filter table: names (with jinja2's aliases) onto filter functions.
#include "chat/builtins.h"
#include "chat/filter_impl.h"

namespace hearth::chat {
namespace {

struct NamedFilter {
  std::string_view name;
  FilterFn fn;
};

constexpr NamedFilter kFilters[] = {
    {"trim", filters::trim},
    {"length", filters::length},
    {"count", filters::length},
    {"lower", filters::lower},
    {"upper", filters::upper},
    {"title", filters::title},
    {"capitalize", filters::capitalize},
    {"tojson", filters::tojson},
    {"default", filters::default_value},
    {"d", filters::default_value},
    {"join", filters::join},
    {"first", filters::first},
    {"last", filters::last},
    {"replace", filters::replace},
    {"string", filters::string},
    {"int", filters::to_int},
    {"float", filters::to_float},
    {"items", filters::items},
    {"list", filters::list},
    {"map", filters::map},
    {"select", filters::select},
    {"reject", filters::reject},
    {"selectattr", filters::selectattr},
    {"rejectattr", filters::rejectattr},
    {"indent", filters::indent},
    {"unique", filters::unique},
    {"sort", filters::sort},
    {"dictsort", filters::dictsort},
    {"safe", filters::safe},
    {"escape", filters::escape},
    {"e", filters::escape},
    {"abs", filters::abs},
    {"round", filters::round},
    {"wordcount", filters::wordcount},
    {"reverse", filters::reverse},
    {"sum", filters::sum},
    {"min", filters::min},
    {"max", filters::max},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const NamedFilter& f : kFilters)
    if (f.name == name) return f.fn;
  return nullptr;
}

}  // namespace hearth::chat
