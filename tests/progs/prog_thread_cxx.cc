// C++ threads: std::thread, std::mutex, std::condition_variable and
// thread_local with a destructor, the same natively and under goshim.
#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

static std::atomic<int> destroyed{0};
static std::atomic<int> raii_destroyed{0};

struct Tracker {
    int id = -1;
    ~Tracker()
    {
        if (id >= 0)
            destroyed++;
    }
};
static thread_local Tracker tracker;
static thread_local std::string label = "unset";

struct Raii {
    ~Raii() { raii_destroyed++; }
};

int main()
{
    std::mutex m;
    std::condition_variable cv;
    int turn = 0;
    const int rounds = 2000;
    auto player = [&](int me) {
        tracker.id = me;
        label = "player" + std::to_string(me);
        for (int i = 0; i < rounds; i++) {
            std::unique_lock<std::mutex> lk(m);
            cv.wait(lk, [&] { return turn % 2 == me; });
            turn++;
            cv.notify_all();
        }
        if (label != "player" + std::to_string(me))
            std::printf("thread_local string changed\n");
    };
    std::thread a(player, 0), b(player, 1);
    a.join();
    b.join();
    std::printf("ping-pong: %d turns\n", turn);

    std::vector<std::thread> ts;
    long sum = 0;
    std::mutex sm;
    for (int i = 0; i < 16; i++)
        ts.emplace_back([&, i] {
            tracker.id = i;
            std::lock_guard<std::mutex> g(sm);
            sum += i;
        });
    for (auto &t : ts)
        t.join();
    std::printf("16 threads: sum %ld, thread_local destructors %d\n", sum, destroyed.load());

    std::thread e([] {
        Raii r;
        tracker.id = 99;
        pthread_exit(nullptr); // runs ~Raii and the thread_local destructor
    });
    e.join();
    std::printf("pthread_exit in C++: RAII destructors %d, thread_local destructors %d\n",
                raii_destroyed.load(), destroyed.load());
    std::printf("main label %s\n", label.c_str());
    return turn == 2 * rounds && sum == 120 && raii_destroyed == 1 && destroyed == 19 ? 0 : 1;
}
