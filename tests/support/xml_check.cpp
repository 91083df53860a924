#include "tests/support/xml_check.h"

#include <cctype>
#include <vector>

#include <fmt/format.h>

namespace primer::test {
namespace {

bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == ':' || c == '_'; }

// Character data: '<' never appears raw, '&' only as an entity.
bool valid_text(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] == '&') {
      const size_t semi = s.find(';', i);
      if (semi == std::string::npos || semi - i > 8) return false;
    }
  return true;
}

}  // namespace

XmlCheck check_xml(const std::string& text) {
  XmlCheck out;
  std::vector<std::string> open;
  bool root_seen = false;
  size_t i = text.find('<');
  if (i == std::string::npos) return {"no element", {}, {}};
  auto fail = [&](const std::string& what) {
    out.error = fmt::format("{} at byte {}", what, i);
    return out;
  };
  while (i < text.size()) {
    if (text[i] != '<') {
      const size_t next = text.find('<', i);
      const std::string chars = text.substr(i, next - i);
      if (!valid_text(chars)) return fail("an unescaped '&' in text");
      if (open.empty() && chars.find_first_not_of(" \t\r\n") != std::string::npos) return fail("text outside the root");
      out.text += chars;
      if (next == std::string::npos) break;
      i = next;
      continue;
    }
    if (text.compare(i, 9, "<!DOCTYPE") == 0) {
      if (root_seen) return fail("a DOCTYPE after the root");
      i = text.find('>', i);
      if (i == std::string::npos) return fail("an unterminated DOCTYPE");
      ++i;
      continue;
    }
    const bool closing = text.compare(i, 2, "</") == 0;
    size_t j = i + (closing ? 2 : 1);
    const size_t name_start = j;
    while (j < text.size() && name_char(text[j])) ++j;
    const std::string name = text.substr(name_start, j - name_start);
    if (name.empty()) return fail("a tag without a name");
    if (closing) {
      while (j < text.size() && std::isspace(static_cast<unsigned char>(text[j]))) ++j;
      if (j >= text.size() || text[j] != '>') return fail("a malformed closing tag");
      if (open.empty() || open.back() != name) return fail("</" + name + "> closes nothing open");
      open.pop_back();
      i = j + 1;
      continue;
    }
    if (open.empty() && root_seen) return fail("a second root element <" + name + ">");
    // Attributes: name="value" (or 'value'), separated by white space.
    bool self_closing = false;
    for (;;) {
      while (j < text.size() && std::isspace(static_cast<unsigned char>(text[j]))) ++j;
      if (j >= text.size()) return fail("an unterminated tag <" + name);
      if (text[j] == '>') break;
      if (text.compare(j, 2, "/>") == 0) {
        self_closing = true;
        ++j;
        break;
      }
      const size_t attr = j;
      while (j < text.size() && name_char(text[j])) ++j;
      if (j == attr || j + 1 >= text.size() || text[j] != '=' || (text[j + 1] != '"' && text[j + 1] != '\''))
        return fail("a malformed attribute in <" + name + ">");
      const size_t end = text.find(text[j + 1], j + 2);
      if (end == std::string::npos) return fail("an unterminated attribute value in <" + name + ">");
      const std::string value = text.substr(j + 2, end - j - 2);
      if (value.find('<') != std::string::npos || !valid_text(value))
        return fail("an unescaped character in an attribute of <" + name + ">");
      j = end + 1;
    }
    ++out.elements[name];
    root_seen = true;
    if (!self_closing) open.push_back(name);
    i = j + 1;
  }
  if (!open.empty()) {
    i = text.size();
    return fail("<" + open.back() + "> is never closed");
  }
  if (!root_seen) return {"no element", {}, {}};
  return out;
}

}  // namespace primer::test
