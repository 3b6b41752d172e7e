<?php

// The proxy of DropFirstResponses: php drop_proxy.php UPSTREAM METHOD PREFIX DROP LOGFILE.
// Serves one connection at a time (the tests send one request at a time).

declare(strict_types=1);

[, $upstream, $method, $prefix, $drop, $logFile] = $argv;
$drop = (int) $drop;
$up = parse_url($upstream);
$server = stream_socket_server('tcp://127.0.0.1:0', $errno, $errstr);
if ($server === false) {
    fwrite(STDERR, "drop_proxy: $errstr\n");
    exit(1);
}
echo 'listening ', stream_socket_get_name($server, false), "\n";
flush();

while (true) {
    $conn = @stream_socket_accept($server, -1);
    if ($conn === false) {
        continue;
    }
    $head = '';
    while (!str_contains($head, "\r\n\r\n") && !feof($conn)) {
        $head .= (string) fgets($conn);
    }
    [$head] = explode("\r\n\r\n", $head, 2);
    $lines = explode("\r\n", $head);
    [$reqMethod, $target] = explode(' ', $lines[0]) + ['', ''];
    $headers = [];
    $length = 0;
    $key = '';
    foreach (array_slice($lines, 1) as $line) {
        [$name, $value] = array_map('trim', explode(':', $line, 2) + ['', '']);
        match (strtolower($name)) {
            'content-length' => $length = (int) $value,
            'idempotency-key' => $key = $value,
            default => null,
        };
        if (!in_array(strtolower($name), ['host', 'connection'], true)) {
            $headers[] = "$name: $value";
        }
    }
    $body = '';
    while (strlen($body) < $length && !feof($conn)) {
        $body .= (string) fread($conn, $length - strlen($body));
    }
    $out = stream_socket_client("tcp://{$up['host']}:{$up['port']}", $errno, $errstr, 10);
    if ($out === false) {
        fclose($conn);
        continue;
    }
    fwrite($out, "$reqMethod $target HTTP/1.1\r\nHost: {$up['host']}:{$up['port']}\r\nConnection: close\r\n"
        . implode("\r\n", $headers) . "\r\n\r\n" . $body);
    $response = stream_get_contents($out);
    fclose($out);
    $dropIt = $reqMethod === $method && str_starts_with($target, $prefix) && $drop > 0;
    if ($dropIt) {
        $drop--;
    }
    file_put_contents($logFile, json_encode([
        'method' => $reqMethod, 'target' => $target, 'idempotencyKey' => $key, 'dropped' => $dropIt,
    ]) . "\n", FILE_APPEND);
    if (!$dropIt) {
        fwrite($conn, (string) $response);
    }
    fclose($conn);
}
