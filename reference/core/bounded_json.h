// JSON from files Tripod did not necessarily write (safetensors headers, meta.json, checkpoint
// manifests) parsed with the limits a hostile file needs: a nesting bound, checked while parsing
// so that a million nested brackets are refused at the bound instead of building (and later
// copying or printing, recursively) a value that deep; and, where asked, the top-level keys in
// file order with a repeated key refused. Keys go into nlohmann::json's std::map (O(log n) each)
// rather than ordered_json's linear lookup, which made a header of n tensors O(n^2) to parse.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tripod {

// Throws tripod::Error naming `origin` for invalid JSON, nesting deeper than `max_depth` (the
// top-level value is depth 0, its members depth 1), or, when `top_level_keys` is given, a key that
// appears twice in the top-level object; that list receives the top-level keys in file order.
nlohmann::json parse_bounded_json(std::string_view text, const std::string& origin, int max_depth,
                                  std::vector<std::string>* top_level_keys = nullptr);

// Throws tripod::Error naming `origin` and the key's path ("model.n_layer") when an object of
// `text`, at any depth, has a key twice: nlohmann::json keeps the last silently, so a config file
// edited by hand ran with whichever came second. Text that does not parse is refused with the
// parser's line and column (`comments`: // and /* */ allowed, as the config parse allows them).
void check_no_repeated_keys(std::string_view text, const std::string& origin, bool comments);

}  // namespace tripod
