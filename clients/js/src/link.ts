/**
 * The target of the first link with relation type "next" in a Link header
 * (RFC 8288), or undefined. Links with an anchor are about another resource
 * and are skipped. Commas and semicolons inside the URI reference or a
 * quoted string separate nothing.
 */
export function nextLink(header: string | null): string | undefined {
  if (!header) return undefined;
  for (const link of parseLinks(header)) {
    if (link.params.get("anchor")) continue;
    const rels = (link.params.get("rel") ?? "").split(/[ \t]+/);
    if (rels.some((r) => r.toLowerCase() === "next")) return link.target;
  }
  return undefined;
}

interface Link {
  target: string;
  /** The first occurrence of each parameter, by lower-case name. */
  params: Map<string, string>;
}

const tchar = /[!#$%&'*+\-.^_`|~0-9A-Za-z]/;

/** Parses a Link header field value; throws on a malformed one. */
export function parseLinks(s: string): Link[] {
  const links: Link[] = [];
  let i = 0;
  const malformed = (what: string) => new Error(`malformed Link header: ${what} at offset ${i}`);
  const skipOWS = () => {
    while (i < s.length && (s[i] === " " || s[i] === "\t")) i++;
  };
  const token = () => {
    const start = i;
    while (i < s.length && tchar.test(s[i]!)) i++;
    return s.slice(start, i);
  };
  for (;;) {
    while (i < s.length && (s[i] === " " || s[i] === "\t" || s[i] === ",")) i++;
    if (i === s.length) return links;
    if (s[i] !== "<") throw malformed('want "<"');
    const end = s.indexOf(">", i + 1);
    if (end < 0) throw malformed('no ">" after "<"');
    const link: Link = { target: s.slice(i + 1, end).trim(), params: new Map() };
    i = end + 1;
    for (;;) {
      skipOWS();
      if (i === s.length || s[i] === ",") break;
      if (s[i] !== ";") throw malformed('want ";" or ","');
      i++;
      skipOWS();
      const name = token().toLowerCase();
      if (!name) throw malformed("want a parameter name");
      skipOWS();
      let value = "";
      if (s[i] === "=") {
        i++;
        skipOWS();
        if (s[i] === '"') {
          let v = "";
          let j = i + 1;
          for (; j < s.length && s[j] !== '"'; j++) {
            if (s[j] === "\\") j++;
            if (j < s.length) v += s[j];
          }
          if (j >= s.length) throw malformed("unterminated quoted string");
          i = j + 1;
          value = v;
        } else {
          value = token();
          if (!value) throw malformed("want a parameter value");
        }
      }
      if (!link.params.has(name)) link.params.set(name, value);
    }
    links.push(link);
  }
}
