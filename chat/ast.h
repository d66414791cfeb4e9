// The parsed form of a template: expressions and statements. Built once by
// the parser, never changed afterwards, so one tree may be rendered by many
// threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/lexer.h"
#include "chat/value.h"

namespace hearth::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // children = items
    kTuple,    // children = items
    kDict,     // children = key, value, key, value, ...
    kAttr,     // children[0].name
    kItem,     // children[0][children[1]]
    kSlice,    // children[0][children[1]:children[2]:children[3]] (each may be null)
    kCall,     // children[0](children[1..], kwargs)
    kFilter,   // children[0] | name(children[1..], kwargs)
    kTest,     // children[0] is name(children[1..], kwargs)
    kUnary,    // name ("-" or "+") children[0]
    kBinary,   // children[0] name children[1]; name in + - * / // % ** ~
    kCompare,  // children[0] ops[0] children[1] ops[1] children[2] ...
    kAnd,
    kOr,
    kNot,
    kCond,  // children[0] if children[1] else children[2] (may be null)
  };

  Expr(Kind k, Pos p) : kind(k), pos(p) {}

  Kind kind;
  Pos pos;
  Value literal;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::string> ops;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  int depth = 1;  // height of this subtree; the parser bounds it
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches: (condition or null for else, body)
    kFor,       // for targets in expr [if filter]: body [else else_body]
    kSet,       // set targets = expr, or set targets[0].attr = expr
    kSetBlock,  // {% set targets[0] %}body{% endset %}
    kMacro,     // macro name(params = defaults): body
    kBreak,
    kContinue,
  };

  Stmt(Kind k, Pos p) : kind(k), pos(p) {}

  Kind kind;
  Pos pos;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<std::string> targets;
  std::string attr;  // kSet on a namespace attribute
  Body body;
  Body else_body;
  std::string name;  // kMacro
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param, null when it has none
};

}  // namespace hearth::chat
