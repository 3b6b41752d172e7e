<?php

declare(strict_types=1);

namespace Acme\Platform\Internal;

use Acme\Platform\ClientException;

/**
 * Parsing of the Link header (RFC 8288) and resolution of next links.
 *
 * @internal
 */
final class LinkHeader
{
    private const TCHARS = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

    /**
     * Parses one Link header value into [target, params] pairs; params are
     * keyed by lower-case name and keep their first occurrence. Commas and
     * semicolons inside <...> or a quoted string separate nothing.
     *
     * @return list<array{0: string, 1: array<string, string>}>
     */
    public static function parse(string $value): array
    {
        $links = [];
        $i = 0;
        $n = strlen($value);
        $fail = static function (string $what) use (&$i): ClientException {
            return new ClientException(sprintf('malformed Link header: %s at offset %d', $what, $i));
        };
        $skipOws = static function () use ($value, $n, &$i): void {
            while ($i < $n && ($value[$i] === ' ' || $value[$i] === "\t")) {
                $i++;
            }
        };
        $token = static function () use ($value, $n, &$i): string {
            $len = strspn($value, self::TCHARS, $i);
            $t = substr($value, $i, $len);
            $i += $len;
            return $t;
        };
        while (true) {
            while ($i < $n && str_contains(" \t,", $value[$i])) {
                $i++;
            }
            if ($i === $n) {
                return $links;
            }
            if ($value[$i] !== '<') {
                throw $fail('want "<"');
            }
            $end = strpos($value, '>', $i + 1);
            if ($end === false) {
                throw $fail('no ">" after "<"');
            }
            $target = trim(substr($value, $i + 1, $end - $i - 1));
            $params = [];
            $i = $end + 1;
            while (true) {
                $skipOws();
                if ($i === $n || $value[$i] === ',') {
                    break;
                }
                if ($value[$i] !== ';') {
                    throw $fail('want ";" or ","');
                }
                $i++;
                $skipOws();
                $name = strtolower($token());
                if ($name === '') {
                    throw $fail('want a parameter name');
                }
                $skipOws();
                $param = '';
                if ($i < $n && $value[$i] === '=') {
                    $i++;
                    $skipOws();
                    if ($i < $n && $value[$i] === '"') {
                        $i++;
                        while (true) {
                            if ($i === $n) {
                                throw $fail('unterminated quoted string');
                            }
                            $c = $value[$i];
                            if ($c === '"') {
                                $i++;
                                break;
                            }
                            if ($c === '\\') {
                                $i++;
                                if ($i === $n) {
                                    throw $fail('unterminated quoted string');
                                }
                                $c = $value[$i];
                            }
                            $param .= $c;
                            $i++;
                        }
                    } else {
                        $param = $token();
                        if ($param === '') {
                            throw $fail('want a parameter value');
                        }
                    }
                }
                $params[$name] ??= $param;
            }
            $links[] = [$target, $params];
        }
    }

    /**
     * The target of the first link with relation type "next", null when
     * there is none. Links with an anchor are about another resource.
     *
     * @param list<string> $values every Link header value of a response
     */
    public static function next(array $values): ?string
    {
        foreach ($values as $value) {
            foreach (self::parse($value) as [$target, $params]) {
                if (($params['anchor'] ?? '') !== '') {
                    continue;
                }
                $rels = preg_split('/\s+/', $params['rel'] ?? '', -1, PREG_SPLIT_NO_EMPTY) ?: [];
                foreach ($rels as $rel) {
                    if (strtolower($rel) === 'next') {
                        return $target;
                    }
                }
            }
        }
        return null;
    }

    /**
     * Resolves the target of a next link received in answer to the request
     * for $current. A target with an absolute path (the service's /v1/...)
     * is relative to the service root $base, which may carry a path prefix;
     * an absolute URL must have the origin of $base, since the bearer token
     * is sent to it; a relative reference is resolved against $current.
     */
    public static function resolve(string $base, string $current, string $target): string
    {
        $target = explode('#', $target, 2)[0];
        if (preg_match('~^[a-zA-Z][a-zA-Z0-9+.-]*:~', $target) === 1 || str_starts_with($target, '//')) {
            $url = str_starts_with($target, '//') ? (string) parse_url($base, PHP_URL_SCHEME) . ':' . $target : $target;
            if (strtolower(self::origin($url)) !== strtolower(self::origin($base))) {
                throw new ClientException(
                    'refusing to follow a next link to another origin (' . self::origin($url) . ')'
                );
            }
            return $url;
        }
        if (str_starts_with($target, '/')) {
            return $base . $target;
        }
        // A relative path or a query alone: against the current URL.
        $currentPath = explode('?', $current, 2)[0];
        if (str_starts_with($target, '?')) {
            return $currentPath . $target;
        }
        return substr($currentPath, 0, (int) strrpos($currentPath, '/') + 1) . $target;
    }

    private static function origin(string $url): string
    {
        $parts = parse_url($url);
        if ($parts === false || !isset($parts['scheme'], $parts['host'])) {
            return '';
        }
        return $parts['scheme'] . '://' . $parts['host'] . (isset($parts['port']) ? ':' . $parts['port'] : '');
    }
}
