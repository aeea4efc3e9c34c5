-- Inverts crawlhive.utils.backends.keys.escape, for ids parsed out of crawl refs.
local function unescape(part)
  return (string.gsub(string.gsub(part, '%%3A', ':'), '%%25', '%%'))
end
