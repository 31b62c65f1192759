import { TimerQueue, type TimerQueueItem } from '../../lib/core/timer-queue.js';

/**
 * The one timer primitive of the library: lease renewals (repeat) and Redis call
 * deadlines (one-shot). Fake timers drive `setTimeout` and `performance.now()` alike, so
 * every due time below is exact.
 */
interface Item extends TimerQueueItem {
  readonly name: string;
}

const item = (name: string): Item => ({ name, dueAt: 0 });

describe('TimerQueue', () => {
  let fired: string[];
  beforeEach(() => {
    jest.useFakeTimers();
    fired = [];
  });
  afterEach(() => {
    jest.useRealTimers();
  });

  describe('one-shot (the deadlines of Redis calls)', () => {
    it('fires each item `delay` after it joined, in the order they joined, on one timer', () => {
      const queue = new TimerQueue<Item>(100, (due) => fired.push(due.name));
      queue.add(item('a'));
      jest.advanceTimersByTime(30);
      queue.add(item('b'));
      queue.add(item('c'));
      expect(jest.getTimerCount()).toBe(1);

      jest.advanceTimersByTime(69);
      expect(fired).toEqual([]);
      jest.advanceTimersByTime(1);
      expect(fired).toEqual(['a']);
      // Re-armed for the head, not for a whole delay.
      expect(jest.getTimerCount()).toBe(1);
      jest.advanceTimersByTime(29);
      expect(fired).toEqual(['a']);
      jest.advanceTimersByTime(1);
      expect(fired).toEqual(['a', 'b', 'c']);
      expect(queue.size).toBe(0);
      expect(jest.getTimerCount()).toBe(0);
    });

    it('never fires a deleted item, and stops the timer when the last one leaves', () => {
      const queue = new TimerQueue<Item>(100, (due) => fired.push(due.name));
      const a = item('a');
      const b = item('b');
      queue.add(a);
      jest.advanceTimersByTime(50);
      queue.add(b);
      queue.delete(a);
      // Still armed for a's due time: it fires with nothing due and re-arms for b.
      expect(jest.getTimerCount()).toBe(1);
      jest.advanceTimersByTime(50);
      expect(fired).toEqual([]);
      expect(jest.getTimerCount()).toBe(1);
      queue.delete(b);
      expect(jest.getTimerCount()).toBe(0);
      jest.advanceTimersByTime(1_000);
      expect(fired).toEqual([]);
    });

    it('deletes an item once: a second delete, or one after it fired, changes nothing', () => {
      const queue = new TimerQueue<Item>(10, (due) => fired.push(due.name));
      const a = item('a');
      queue.add(a);
      jest.advanceTimersByTime(10);
      expect(fired).toEqual(['a']);
      queue.delete(a);
      queue.delete(a);
      queue.add(item('b'));
      expect(queue.size).toBe(1);
      jest.advanceTimersByTime(10);
      expect(fired).toEqual(['a', 'b']);
    });

    it('calls onDue after moving past the item, so onDue may add it again', () => {
      const queue: TimerQueue<Item> = new TimerQueue<Item>(10, (due) => {
        fired.push(due.name);
        if (fired.length < 3) queue.add(due);
      });
      queue.add(item('a'));
      jest.advanceTimersByTime(100);
      expect(fired).toEqual(['a', 'a', 'a']);
      expect(jest.getTimerCount()).toBe(0);
    });
  });

  describe('repeat (lease renewals)', () => {
    it('fires every `delay` from each item joining, and keeps the items', () => {
      const queue = new TimerQueue<Item>(100, (due) => fired.push(`${due.name}@${Date.now() - start}`), true);
      const start = Date.now();
      queue.add(item('a'));
      jest.advanceTimersByTime(40);
      queue.add(item('b'));
      jest.advanceTimersByTime(260);
      expect(fired).toEqual(['a@100', 'b@140', 'a@200', 'b@240', 'a@300']);
      expect(queue.size).toBe(2);
      expect(jest.getTimerCount()).toBe(1);
    });

    it('stops renewing an item deleted between two renewals, and the timer with the last one', () => {
      const queue = new TimerQueue<Item>(100, (due) => fired.push(due.name), true);
      const a = item('a');
      const b = item('b');
      queue.add(a);
      queue.add(b);
      jest.advanceTimersByTime(100);
      expect(fired).toEqual(['a', 'b']);
      queue.delete(a);
      jest.advanceTimersByTime(100);
      expect(fired).toEqual(['a', 'b', 'b']);
      queue.delete(b);
      expect(jest.getTimerCount()).toBe(0);
      jest.advanceTimersByTime(1_000);
      expect(fired).toEqual(['a', 'b', 'b']);
    });

    it('leaves an item deleted by onDue out of the queue', () => {
      const queue: TimerQueue<Item> = new TimerQueue<Item>(
        50,
        (due) => {
          fired.push(due.name);
          // A renewal that finds the lease lost takes it out of the queue.
          if (due.name === 'lost') queue.delete(due);
        },
        true,
      );
      queue.add(item('lost'));
      queue.add(item('kept'));
      jest.advanceTimersByTime(150);
      expect(fired).toEqual(['lost', 'kept', 'kept', 'kept']);
      expect(queue.size).toBe(1);
    });
  });
});
