import ChorusParallel
import Dispatch
import Synchronization
import Testing

struct Boom: Error, Equatable {
    let step: Int
}

@Suite("Pipelines and background work (ChorusParallel)")
struct PipelineTests {
    /// What a background job captured (an LMDB environment, say) is
    /// released before `wait` returns, not when its thread is torn down
    /// later: a store closed that late could not be opened again meanwhile.
    @Test("a background job's captures are released before wait returns")
    func capturesAreReleasedBeforeWaitReturns() throws {
        final class Flag: Sendable {
            let released = Atomic<Bool>(false)
            var isReleased: Bool { released.load(ordering: .sequentiallyConsistent) }
        }
        final class Captured: Sendable {
            let flag: Flag
            init(_ flag: Flag) { self.flag = flag }
            deinit { flag.released.store(true, ordering: .sequentiallyConsistent) }
        }
        /// The job alone holds the captured object once this returns.
        func start(_ flag: Flag) -> Background<Int> {
            let captured = Captured(flag)
            return Background { withExtendedLifetime(captured) { 7 } }
        }
        for _ in 0..<50 {
            let flag = Flag()
            let job = start(flag)
            #expect(try job.wait() == 7)
            #expect(flag.isReleased)
        }
    }

    @Test("handed-off work runs once and is released after running")
    func handOffRunsOnce() throws {
        let runs = Atomic<Int>(0)
        let work = HandOff { runs.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue }
        #expect(try work.run().get() == 1)
        #expect(throws: CancellationError.self) { try work.run().get() }
        #expect(runs.load(ordering: .sequentiallyConsistent) == 1)
    }

    @Test("every output is consumed once, in order; producer calls never overlap")
    func orderAndExclusion() throws {
        let producing = Atomic<Int>(0)
        let mostAtOnce = Atomic<Int>(0)
        var consumed: [Int] = []
        try pipelined(from: 0) { step -> (output: Int, next: Int?)? in
            let now = producing.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
            mostAtOnce.max(now, ordering: .sequentiallyConsistent)
            defer { producing.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
            return (step * 10, step + 1 < 200 ? step + 1 : nil)
        } consume: { output in
            consumed.append(output)
        }
        #expect(consumed == (0..<200).map { $0 * 10 })
        #expect(mostAtOnce.load(ordering: .sequentiallyConsistent) == 1)
    }

    @Test("the next step is produced while the current one is consumed")
    func stagesOverlap() throws {
        // consume(n) waits until produce(n + 1) has begun: without overlap
        // it would wait out its bound.
        let started = DispatchSemaphore(value: 0)
        var overlapped = 0
        try pipelined(from: 0) { step -> (output: Int, next: Int?)? in
            if step > 0 { started.signal() }
            return (step, step < 5 ? step + 1 : nil)
        } consume: { step in
            if step < 5, started.wait(timeout: .now() + 30) == .success { overlapped += 1 }
        }
        #expect(overlapped == 5)
    }

    @Test("an error from either stage ends the pipeline, after what came before, with the producer stopped")
    func errorsEndIt() throws {
        var consumed: [Int] = []
        #expect(throws: Boom(step: 3)) {
            try pipelined(from: 0) { step -> (output: Int, next: Int?)? in
                if step == 3 { throw Boom(step: 3) }
                return (step, step + 1)
            } consume: { consumed.append($0) }
        }
        #expect(consumed == [0, 1, 2])

        let producing = Atomic<Int>(0)
        #expect(throws: Boom(step: 1)) {
            try pipelined(from: 0) { step -> (output: Int, next: Int?)? in
                producing.wrappingAdd(1, ordering: .sequentiallyConsistent)
                defer { producing.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
                return (step, step + 1)
            } consume: { step in
                if step == 1 { throw Boom(step: 1) }
            }
        }
        // The step being produced when consume threw was waited for.
        #expect(producing.load(ordering: .sequentiallyConsistent) == 0)
    }

    @Test("a planned pipeline consumes every output once, in order, with at most `ahead` builds at once")
    func plannedOrderAndBound() throws {
        for ahead in [1, 2, 3] {
            let building = Atomic<Int>(0)
            let mostAtOnce = Atomic<Int>(0)
            var planned: [Int] = []
            var consumed: [Int] = []
            try pipelined(from: 0, ahead: ahead) { step -> (plan: Int, next: Int?)? in
                planned.append(step)
                return (step, step + 1 < 100 ? step + 1 : nil)
            } build: { step in
                let now = building.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
                mostAtOnce.max(now, ordering: .sequentiallyConsistent)
                defer { building.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
                return step * 10
            } consume: { output in
                consumed.append(output)
            }
            #expect(planned == Array(0..<100))
            #expect(consumed == (0..<100).map { $0 * 10 })
            #expect(mostAtOnce.load(ordering: .sequentiallyConsistent) <= ahead)
        }
    }

    @Test("a planned pipeline builds the next steps side by side")
    func plannedBuildsOverlap() throws {
        // build(n) waits until build(n + 1) has begun: with one build at a
        // time it would wait out its bound.
        let started = (0..<6).map { _ in DispatchSemaphore(value: 0) }
        let overlapped = Atomic<Int>(0)
        try pipelined(from: 0, ahead: 2) { step -> (plan: Int, next: Int?)? in
            (step, step < 5 ? step + 1 : nil)
        } build: { step in
            started[step].signal()
            if step < 5, started[step + 1].wait(timeout: .now() + 10) == .success {
                overlapped.wrappingAdd(1, ordering: .sequentiallyConsistent)
            }
            return step
        } consume: { _ in }
        #expect(overlapped.load(ordering: .sequentiallyConsistent) == 5)
    }

    @Test("an error from any stage of a planned pipeline ends it, after what came before, with every build finished")
    func plannedErrorsEndIt() throws {
        let building = Atomic<Int>(0)
        @Sendable func build(_ step: Int) throws -> Int {
            building.wrappingAdd(1, ordering: .sequentiallyConsistent)
            defer { building.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
            if step == 3 { throw Boom(step: 3) }
            return step
        }
        var consumed: [Int] = []
        #expect(throws: Boom(step: 3)) {
            try pipelined(from: 0, ahead: 2) { (step: Int) -> (plan: Int, next: Int?)? in (step, step + 1) } build: { try build($0) } consume: {
                consumed.append($0)
            }
        }
        #expect(consumed == [0, 1, 2])
        #expect(building.load(ordering: .sequentiallyConsistent) == 0)

        consumed = []
        #expect(throws: Boom(step: 2)) {
            try pipelined(from: 0, ahead: 2) { (step: Int) -> (plan: Int, next: Int?)? in
                if step == 2 { throw Boom(step: 2) }
                return (step, step + 1)
            } build: { $0 } consume: { consumed.append($0) }
        }
        // Plans run ahead of the consumer: step 2 is planned once step 0
        // is taken, before step 0 is consumed.
        #expect(consumed.isEmpty)

        #expect(throws: Boom(step: 1)) {
            try pipelined(from: 0, ahead: 2) { (step: Int) -> (plan: Int, next: Int?)? in (step, step + 1) } build: { step in
                building.wrappingAdd(1, ordering: .sequentiallyConsistent)
                defer { building.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
                return step
            } consume: { step in
                if step == 1 { throw Boom(step: 1) }
            }
        }
        #expect(building.load(ordering: .sequentiallyConsistent) == 0)
    }

    @Test("background work returns its value to every wait, or rethrows its error")
    func background() throws {
        let work = Background { (1...1000).reduce(0, +) }
        #expect(try work.wait() == 500_500)
        #expect(try work.wait() == 500_500)
        let failing = Background { () throws -> Int in throw Boom(step: 7) }
        #expect(throws: Boom(step: 7)) { try failing.wait() }
    }
}
