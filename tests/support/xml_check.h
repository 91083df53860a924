// A small XML well-formedness check for the SVG and HTML files primer writes: balanced tags, quoted attributes,
// escaped text, one root element. Not a validating parser.
#pragma once
#include <map>
#include <string>

namespace primer::test {

struct XmlCheck {
  std::string error;                    // empty when well formed; else what and where (byte offset)
  std::map<std::string, int> elements;  // element name → how many
  std::string text;                     // the character data, entities as written
};

// `text` from its first '<'; a leading <!DOCTYPE ...> is allowed (HTML).
XmlCheck check_xml(const std::string& text);

}  // namespace primer::test
