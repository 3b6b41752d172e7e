<?php

declare(strict_types=1);

namespace Acme\Platform\Tests;

use Acme\Platform\ApiError;
use Acme\Platform\ClientException;
use Acme\Platform\Tests\Support\Env;
use Acme\Platform\Tests\Support\ServiceTestCase;

/**
 * Answers nested 10,000 levels deep (a metadata or config stored before the
 * services limited nesting) are this client's ClientException, never a
 * crash. A small server (tests/Support/deep_json_server.php) stands in for
 * the conversations service, which now refuses to store such a value; the
 * login goes to the real account service.
 */
final class DeepJsonTest extends ServiceTestCase
{
    /** @var resource */
    private $server;
    private string $url;

    protected function setUp(): void
    {
        parent::setUp();
        $command = [PHP_BINARY, __DIR__ . '/Support/deep_json_server.php'];
        $process = proc_open($command, [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => STDERR], $pipes);
        if ($process === false) {
            throw new \RuntimeException('cannot start the server');
        }
        $this->server = $process;
        $line = fgets($pipes[1]);
        if ($line === false || !preg_match('/^listening (\S+)/', $line, $m)) {
            throw new \RuntimeException('the server did not start');
        }
        $this->url = 'http://' . $m[1];
    }

    protected function tearDown(): void
    {
        proc_terminate($this->server);
        proc_close($this->server);
    }

    private function expectClientException(callable $call): ClientException
    {
        try {
            $call();
        } catch (ClientException $e) {
            return $e;
        }
        $this->fail('no ClientException');
    }

    public function testADeepListingIsAClientException(): void
    {
        $client = Env::userClient(conversationsUrl: $this->url);
        $e = $this->expectClientException(fn () => iterator_to_array($client->messages('cnv_1'), false));
        $this->assertNotInstanceOf(ApiError::class, $e);
        $this->assertStringContainsString('nested more than 512 levels deep', $e->getMessage());
    }

    public function testADeepResourceIsAClientException(): void
    {
        $client = Env::userClient(conversationsUrl: $this->url);
        $e = $this->expectClientException(fn () => $client->getConversation('cnv_1'));
        $this->assertStringContainsString('nested more than 512 levels deep', $e->getMessage());
    }

    public function testADeepErrorBodyIsStillAnApiError(): void
    {
        $client = Env::userClient(conversationsUrl: $this->url);
        $e = $this->expectClientException(fn () => $client->getConversation('problem'));
        $this->assertInstanceOf(ApiError::class, $e);
        $this->assertSame([400, 'http_400'], [$e->status, $e->code()]);
    }
}
