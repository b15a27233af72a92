// C++ standard threads under goshim (scripts/test_real.sh, case cxx_threads):
// std::thread, std::mutex, std::condition_variable, std::atomic,
// thread_local, std::async/std::future, std::shared_mutex, std::call_once,
// std::this_thread::sleep_for. Every line printed is deterministic, so the
// output under goshim must equal the native output; a self-check failure
// also makes the exit status 1.
//
//   usage: cxx_threads [SCALE]     (SCALE multiplies the iteration counts)
//   built by scripts/test_real.sh: g++ -std=c++17 -O2 -pthread

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <future>
#include <mutex>
#include <numeric>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

static double scale = 1.0;
static int bad = 0;

static long n(long x)
{
    long r = static_cast<long>(x * scale);
    return r < 1 ? 1 : r;
}

static void check(bool ok, const char *what)
{
    if (!ok) {
        std::printf("FAILED: %s\n", what);
        bad = 1;
    }
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

// 1. std::mutex counter: 8 threads.
static void mutex_counter()
{
    std::mutex mu;
    long total = 0;
    const long per = n(100000);
    std::vector<std::thread> ts;
    for (int k = 0; k < 8; k++)
        ts.emplace_back([&, k] {
            for (long i = 0; i < per; i++) {
                std::lock_guard<std::mutex> g(mu);
                total += (k + 1);
            }
        });
    for (auto &t : ts)
        t.join();
    check(total == per * 36, "mutex counter");
    std::printf("mutex_counter %ld\n", total);
}

// 2. Bounded queue with std::condition_variable: 3 producers, 3 consumers.
static void bounded_queue()
{
    std::mutex mu;
    std::condition_variable not_full, not_empty;
    std::deque<uint64_t> q;
    const size_t cap = 16;
    const long items = n(20000);
    int producers_left = 3;
    std::atomic<uint64_t> sum{0};
    std::atomic<long> count{0};
    std::vector<std::thread> ts;
    for (int p = 0; p < 3; p++)
        ts.emplace_back([&, p] {
            for (long i = 0; i < items; i++) {
                std::unique_lock<std::mutex> lk(mu);
                not_full.wait(lk, [&] { return q.size() < cap; });
                q.push_back(mix(static_cast<uint64_t>(p) * items + i));
                not_empty.notify_one();
            }
            std::lock_guard<std::mutex> g(mu);
            if (--producers_left == 0)
                not_empty.notify_all();
        });
    for (int c = 0; c < 3; c++)
        ts.emplace_back([&] {
            for (;;) {
                std::unique_lock<std::mutex> lk(mu);
                not_empty.wait(lk, [&] { return !q.empty() || producers_left == 0; });
                if (q.empty())
                    return;
                uint64_t v = q.front();
                q.pop_front();
                not_full.notify_one();
                lk.unlock();
                sum.fetch_add(v, std::memory_order_relaxed);
                count.fetch_add(1, std::memory_order_relaxed);
            }
        });
    for (auto &t : ts)
        t.join();
    uint64_t want = 0;
    for (int p = 0; p < 3; p++)
        for (long i = 0; i < items; i++)
            want += mix(static_cast<uint64_t>(p) * items + i);
    check(sum == want && count == 3 * items, "bounded queue");
    std::printf("bounded_queue %ld %llu\n", count.load(), (unsigned long long)sum.load());
}

// 3. std::atomic: fetch_add from many threads, and a spin-free ticket hand-off.
static void atomics()
{
    std::atomic<long> a{0};
    std::atomic<int> turn{0};
    long order = 0;
    const long per = n(200000);
    const int rounds = static_cast<int>(n(200));
    std::vector<std::thread> ts;
    for (int k = 0; k < 4; k++)
        ts.emplace_back([&] {
            for (long i = 0; i < per; i++)
                a.fetch_add(1, std::memory_order_relaxed);
        });
    // Two threads alternate through an atomic turn, yielding while waiting.
    for (int me = 0; me < 2; me++)
        ts.emplace_back([&, me] {
            for (int r = 0; r < rounds; r++) {
                while (turn.load(std::memory_order_acquire) != me)
                    std::this_thread::yield();
                order = order * 3 + me + 1;
                order %= 1000000007;
                turn.store(1 - me, std::memory_order_release);
            }
        });
    for (auto &t : ts)
        t.join();
    check(a == 4 * per, "atomic fetch_add");
    std::printf("atomics %ld %ld\n", a.load(), order);
}

// 4. thread_local: each thread accumulates in its own variable; the
// destructor of a thread_local object runs at thread exit.
static std::atomic<long> tl_dtor_sum{0};
struct TlObj {
    long v = 0;
    ~TlObj()
    {
        tl_dtor_sum.fetch_add(v);
    }
};
static thread_local long tl_counter = 0;
static thread_local TlObj tl_obj;

static void thread_locals()
{
    std::vector<std::thread> ts;
    std::vector<long> res(16);
    for (int k = 0; k < 16; k++)
        ts.emplace_back([&, k] {
            for (int i = 0; i < 1000; i++) {
                tl_counter += k;
                if (i % 100 == 0)
                    std::this_thread::yield(); // let other threads run on this OS thread
            }
            tl_obj.v = tl_counter;
            res[k] = tl_counter;
        });
    for (auto &t : ts)
        t.join();
    long s = std::accumulate(res.begin(), res.end(), 0L);
    check(s == 1000L * 120 && tl_dtor_sum == s && tl_counter == 0, "thread_local");
    std::printf("thread_locals %ld %ld %ld\n", s, tl_dtor_sum.load(), tl_counter);
}

// 5. std::async (launch::async) and futures, a promise, a packaged_task.
static void async_futures()
{
    std::vector<std::future<uint64_t>> fs;
    const long chunk = n(50000);
    for (int k = 0; k < 8; k++)
        fs.push_back(std::async(std::launch::async, [k, chunk] {
            uint64_t s = 0;
            for (long i = 0; i < chunk; i++)
                s += mix(static_cast<uint64_t>(k) * chunk + i) & 0xffff;
            return s;
        }));
    uint64_t total = 0;
    for (auto &f : fs)
        total += f.get();
    std::promise<int> pr;
    std::future<int> pf = pr.get_future();
    std::thread setter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        pr.set_value(42);
    });
    int pv = pf.get();
    setter.join();
    std::packaged_task<long(long)> task([](long x) { return x * x; });
    std::future<long> tf = task.get_future();
    std::thread runner(std::move(task), 12345);
    long tv = tf.get();
    runner.join();
    check(pv == 42 && tv == 12345L * 12345, "promise/packaged_task");
    std::printf("async_futures %llu %d %ld\n", (unsigned long long)total, pv, tv);
}

// 6. std::shared_mutex readers and writers, std::call_once, sleep_for with a
// condition_variable::wait_for timeout.
static void shared_and_once()
{
    std::shared_mutex sm;
    std::vector<long> table(64, 0);
    std::once_flag once;
    std::atomic<int> once_runs{0};
    std::atomic<long> reads{0};
    const long writes = n(5000);
    std::vector<std::thread> ts;
    for (int w = 0; w < 2; w++)
        ts.emplace_back([&, w] {
            std::call_once(once, [&] { once_runs++; });
            for (long i = 0; i < writes; i++) {
                std::unique_lock<std::shared_mutex> lk(sm);
                table[(i * 7 + w) % 64] += 1;
            }
        });
    for (int r = 0; r < 4; r++)
        ts.emplace_back([&] {
            std::call_once(once, [&] { once_runs++; });
            for (long i = 0; i < writes; i++) {
                std::shared_lock<std::shared_mutex> lk(sm);
                long s = 0;
                for (long v : table)
                    s += v;
                if (s >= 0)
                    reads++;
            }
        });
    for (auto &t : ts)
        t.join();
    long s = std::accumulate(table.begin(), table.end(), 0L);
    // A timed wait that nobody signals must time out after about 20 ms.
    std::mutex mu;
    std::condition_variable cv;
    std::unique_lock<std::mutex> lk(mu);
    auto t0 = std::chrono::steady_clock::now();
    bool woke = cv.wait_for(lk, std::chrono::milliseconds(20), [] { return false; });
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - t0)
                  .count();
    check(s == 2 * writes && once_runs == 1 && reads == 4 * writes, "shared_mutex/call_once");
    check(!woke && ms >= 19 && ms < 2000, "condition_variable::wait_for timeout");
    std::printf("shared_and_once %ld %d %ld timed_wait_ok=%d\n", s, once_runs.load(),
                reads.load(), !woke && ms >= 19 && ms < 2000);
}

// 7. Many short-lived threads in waves (create/join churn).
static void churn()
{
    std::atomic<long> s{0};
    const int waves = static_cast<int>(n(50));
    for (int w = 0; w < waves; w++) {
        std::vector<std::thread> ts;
        for (int k = 0; k < 20; k++)
            ts.emplace_back([&, w, k] { s += w * 20 + k; });
        for (auto &t : ts)
            t.join();
    }
    long m = waves * 20L;
    check(s == m * (m - 1) / 2, "churn");
    std::printf("churn %ld\n", s.load());
}

int main(int argc, char **argv)
{
    if (argc > 1)
        scale = std::atof(argv[1]);
    if (!(scale > 0))
        scale = 1.0;
    mutex_counter();
    bounded_queue();
    atomics();
    thread_locals();
    async_futures();
    shared_and_once();
    churn();
    std::printf("%s\n", bad ? "cxx_threads: FAILED" : "cxx_threads: ok");
    return bad;
}
