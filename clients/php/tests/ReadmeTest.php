<?php

declare(strict_types=1);

namespace Acme\Platform\Tests;

use Acme\Platform\Tests\Support\Env;
use Acme\Platform\Tests\Support\ServiceTestCase;

/**
 * The README as a newcomer meets it: its Install lines run in a temporary
 * project (Composer from the path repository, network disabled), then its
 * PHP snippets, read from README.md at test time and run as printed (only
 * the endpoints and credentials swapped for the suite's) against the real
 * services.
 */
final class ReadmeTest extends ServiceTestCase
{
    private const PACKAGE_DIR = __DIR__ . '/..';

    private static function section(string $title): string
    {
        $text = (string) file_get_contents(self::PACKAGE_DIR . '/README.md');
        $start = strpos($text, "\n## $title\n");
        self::assertNotFalse($start, "README section $title");
        $end = strpos($text, "\n## ", $start + 1);
        return substr($text, $start, $end === false ? null : $end - $start);
    }

    /** @return list<string> */
    private static function blocks(string $text, string $lang): array
    {
        preg_match_all('/^```' . $lang . '\n(.*?)^```/sm', $text, $m);
        return $m[1];
    }

    /** @return list<string> every file and folder under $dir */
    private static function filesUnder(string $dir): array
    {
        $out = [];
        $it = new \RecursiveIteratorIterator(
            new \RecursiveDirectoryIterator($dir, \FilesystemIterator::SKIP_DOTS),
            \RecursiveIteratorIterator::SELF_FIRST,
        );
        foreach ($it as $path => $_) {
            $out[] = substr((string) $path, strlen($dir));
        }
        sort($out);
        return $out;
    }

    /**
     * @param list<string>          $command
     * @param array<string, string> $env
     * @return array{0: int, 1: string}
     */
    private static function runCommand(array $command, string $cwd, array $env): array
    {
        $process = proc_open($command, [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['redirect', 1]], $pipes, $cwd, $env);
        self::assertIsResource($process);
        fclose($pipes[0]);
        $output = (string) stream_get_contents($pipes[1]);
        fclose($pipes[1]);
        return [proc_close($process), $output];
    }

    public function testInstallThenEverySnippetAsPrinted(): void
    {
        $install = self::blocks(self::section('Install'), 'sh');
        $this->assertCount(1, $install, 'the Install section has one sh block');
        // The Users snippet uses $url, $clientId and $clientSecret, which its
        // reader has: defined first, as the suite's.
        $usersPrelude = '$url = ' . var_export(Env::get('ACCOUNT_URL'), true) . ";\n"
            . '$clientId = ' . var_export(Env::get('CLIENT_ID'), true) . ";\n"
            . '$clientSecret = ' . var_export(Env::get('CLIENT_SECRET'), true) . ";\n";
        $snippets = array_merge(
            self::blocks(self::section('Example'), 'php'),
            self::blocks(self::section('Events'), 'php'),
            [$usersPrelude . implode("\n", self::blocks(self::section('Users'), 'php'))],
            self::blocks(self::section('Errors'), 'php'),
        );
        $this->assertCount(5, $snippets, 'the example, the service client, the events, users, the errors');
        $this->assertStringStartsWith("<?php\n", $snippets[0]);
        $script = implode("\n", $snippets);
        $swaps = [
            "'http://127.0.0.1:8080'" => var_export(Env::get('ACCOUNT_URL'), true),
            "'http://127.0.0.1:8081'" => var_export(Env::get('CONVERSATIONS_URL'), true),
            "username: 'demo'" => 'username: ' . var_export(Env::get('USERNAME'), true),
            "password: 'plum-orbit-canvas-ladder'" => 'password: ' . var_export(Env::get('PASSWORD'), true),
            "accountName: 'demo'" => 'accountName: ' . var_export(Env::get('ACCOUNT_NAME'), true),
            "clientId: 'cli_...'" => 'clientId: ' . var_export(Env::get('CLIENT_ID'), true),
            "clientSecret: 'cs_...'" => 'clientSecret: ' . var_export(Env::get('CLIENT_SECRET'), true),
        ];
        foreach ($swaps as $printed => $actual) {
            $this->assertStringContainsString($printed, $script, 'the swap of the README\'s endpoints and credentials');
            $script = str_replace($printed, $actual, $script);
        }

        $checkout = (string) realpath(self::PACKAGE_DIR);
        $before = self::filesUnder($checkout);
        $tmp = sys_get_temp_dir() . '/readme-' . bin2hex(random_bytes(6));
        mkdir("$tmp/app", 0700, true);
        // The path repository is ../platform/clients/php: a checkout next
        // to the project.
        symlink(dirname($checkout, 2), "$tmp/platform");
        try {
            $env = [
                'PATH' => (string) getenv('PATH'),
                'HOME' => $tmp,
                'COMPOSER_HOME' => "$tmp/composer-home",
                // Nothing from Packagist: the install works offline.
                'COMPOSER_DISABLE_NETWORK' => '1',
            ];
            [$code, $output] = self::runCommand(['sh', '-ex', '-c', $install[0]], "$tmp/app", $env);
            $this->assertSame(0, $code, $output);
            file_put_contents("$tmp/app/example.php", $script);
            [$code, $output] = self::runCommand([PHP_BINARY, 'example.php'], "$tmp/app", $env);
            $this->assertSame(0, $code, $output);
            $receiverLog = $this->runWebhookReceiver("$tmp/app", $env);
        } finally {
            exec('rm -rf ' . escapeshellarg($tmp));
        }
        $this->assertStringContainsString(Env::get('DEFINITION_NAME'), $output);  // listDefinitions, printed
        $this->assertStringContainsString('Hello again', $output);                // the listing after the update
        $this->assertStringContainsString('subject: ', $output);                  // the field errors of the 400
        // The feed ran and gave a position to store; which events it shows
        // depends on how soon the relay ordered the script's changes (the
        // events suite waits for them: tests/EventsTest.php).
        $this->assertMatchesRegularExpression('/store \d+\n/', $output); // the feed
        $this->assertStringContainsString("live: Seen live\n", $output);          // the stream
        $this->assertStringContainsString(" jane\n", $output);                    // the users listing
        $this->assertStringContainsString('[email_verified] => ', $output);       // jane's userinfo
        $this->assertStringContainsString('webhook message: Delivered and verified', $receiverLog); // the receiver
        $this->assertSame($before, self::filesUnder($checkout), 'the install wrote into the checkout');
    }

    /**
     * The Webhooks section's webhook.php, served by PHP's own server as the
     * README says, receiving a real delivery of an endpoint the suite's
     * service client creates for it; returns the server's log.
     *
     * @param array<string, string> $env
     */
    private function runWebhookReceiver(string $app, array $env): string
    {
        $receiver = self::blocks(self::section('Webhooks'), 'php');
        $this->assertCount(1, $receiver, 'the Webhooks section has one receiver');
        file_put_contents("$app/webhook.php", $receiver[0]);
        $this->assertStringContainsString('php -S 127.0.0.1:9000 webhook.php', self::section('Webhooks'));
        $probe = stream_socket_server('tcp://127.0.0.1:0');
        self::assertNotFalse($probe);
        $address = (string) stream_socket_get_name($probe, false);
        fclose($probe);

        $hooks = Env::serviceClient($this->logger);
        $endpoint = $hooks->createWebhook("http://$address/webhook", events: ['message.created']);
        $log = "$app/receiver.log";
        $server = proc_open(
            [PHP_BINARY, '-S', $address, 'webhook.php'],
            [0 => ['file', '/dev/null', 'r'], 1 => ['file', $log, 'w'], 2 => ['redirect', 1]],
            $pipes,
            $app,
            $env + ['ACME_WEBHOOK_SECRET' => $endpoint['secret']],
        );
        self::assertIsResource($server);
        try {
            // PHP's server listens a moment after it starts (longer on a
            // busy machine): the delivery's three attempts in the suite's
            // retry schedule take under a second, so wait until it answers.
            self::waitListening($address);
            $conversation = $hooks->createConversation(subject: 'Hooked', participants: [Env::get('USER_ID')]);
            $hooks->postMessage($conversation['id'], 'Delivered and verified');
            // The delivery log says when the receiver answered; only a hang
            // reaches this bound.
            for ($i = 0; $i < 600; $i++) {
                foreach ($hooks->webhookDeliveries($endpoint['id']) as $delivery) {
                    if ($delivery['state'] !== 'pending') {
                        $this->assertSame('succeeded', $delivery['state'], (string) file_get_contents($log));
                        break 2;
                    }
                }
                usleep(50_000);
            }
        } finally {
            proc_terminate($server);
            proc_close($server);
            $hooks->deleteWebhook($endpoint['id']);
        }
        return (string) file_get_contents($log);
    }

    /** Waits up to 30 s until something accepts connections at $address. */
    private static function waitListening(string $address): void
    {
        for ($i = 0; $i < 300; $i++) {
            $conn = @stream_socket_client("tcp://$address", $errno, $errstr, 0.1);
            if ($conn !== false) {
                fclose($conn);
                return;
            }
            usleep(100_000);
        }
        self::fail("nothing listens at $address after 30 s");
    }
}
