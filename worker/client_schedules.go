package worker

// The schedule side of Client: ScheduleService. A schedule is named by its
// id or its name. Errors keep the server's gRPC status, wrapped with what
// was being done.

import (
	"context"
	"fmt"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// CreateSchedule stores a schedule that creates a job at each tick of
// spec (a cron expression in a time zone, or a fixed interval).
func (c *Client) CreateSchedule(ctx context.Context, name string, spec *leaseholdv1.ScheduleSpec, paused bool) (*leaseholdv1.Schedule, error) {
	resp, err := c.schedules.CreateSchedule(ctx, &leaseholdv1.CreateScheduleRequest{Name: name, Spec: spec, Paused: paused})
	if err != nil {
		return nil, fmt.Errorf("leasehold: create schedule %q: %w", name, err)
	}
	return resp.GetSchedule(), nil
}

// GetSchedule returns one schedule.
func (c *Client) GetSchedule(ctx context.Context, schedule string) (*leaseholdv1.Schedule, error) {
	resp, err := c.schedules.GetSchedule(ctx, &leaseholdv1.GetScheduleRequest{Schedule: schedule})
	if err != nil {
		return nil, fmt.Errorf("leasehold: get schedule %q: %w", schedule, err)
	}
	return resp.GetSchedule(), nil
}

// ListSchedules pages the tenant's schedules by name.
func (c *Client) ListSchedules(ctx context.Context, req *leaseholdv1.ListSchedulesRequest) (*leaseholdv1.ListSchedulesResponse, error) {
	resp, err := c.schedules.ListSchedules(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("leasehold: list schedules: %w", err)
	}
	return resp, nil
}

// UpdateSchedule replaces a schedule's definition; its next tick is
// recomputed from now.
func (c *Client) UpdateSchedule(ctx context.Context, schedule string, spec *leaseholdv1.ScheduleSpec) (*leaseholdv1.Schedule, error) {
	resp, err := c.schedules.UpdateSchedule(ctx, &leaseholdv1.UpdateScheduleRequest{Schedule: schedule, Spec: spec})
	if err != nil {
		return nil, fmt.Errorf("leasehold: update schedule %q: %w", schedule, err)
	}
	return resp.GetSchedule(), nil
}

// PauseSchedule stops a schedule from firing.
func (c *Client) PauseSchedule(ctx context.Context, schedule, reason string) (*leaseholdv1.Schedule, error) {
	resp, err := c.schedules.PauseSchedule(ctx, &leaseholdv1.PauseScheduleRequest{Schedule: schedule, Reason: reason})
	if err != nil {
		return nil, fmt.Errorf("leasehold: pause schedule %q: %w", schedule, err)
	}
	return resp.GetSchedule(), nil
}

// ResumeSchedule lets a paused schedule fire again from its next tick
// after now.
func (c *Client) ResumeSchedule(ctx context.Context, schedule string) (*leaseholdv1.Schedule, error) {
	resp, err := c.schedules.ResumeSchedule(ctx, &leaseholdv1.ResumeScheduleRequest{Schedule: schedule})
	if err != nil {
		return nil, fmt.Errorf("leasehold: resume schedule %q: %w", schedule, err)
	}
	return resp.GetSchedule(), nil
}

// DeleteSchedule deletes a schedule and its runs; its jobs stay.
func (c *Client) DeleteSchedule(ctx context.Context, schedule string) error {
	if _, err := c.schedules.DeleteSchedule(ctx, &leaseholdv1.DeleteScheduleRequest{Schedule: schedule}); err != nil {
		return fmt.Errorf("leasehold: delete schedule %q: %w", schedule, err)
	}
	return nil
}

// TriggerSchedule fires a schedule now, once per requestID ("" fires each
// call).
func (c *Client) TriggerSchedule(ctx context.Context, schedule, requestID string) (*leaseholdv1.ScheduleRun, error) {
	resp, err := c.schedules.TriggerSchedule(ctx, &leaseholdv1.TriggerScheduleRequest{Schedule: schedule, RequestId: requestID})
	if err != nil {
		return nil, fmt.Errorf("leasehold: trigger schedule %q: %w", schedule, err)
	}
	return resp.GetRun(), nil
}

// ScheduleRuns returns a schedule's newest runs (at most limit; 0 = 20),
// newest first.
func (c *Client) ScheduleRuns(ctx context.Context, schedule string, limit int32) ([]*leaseholdv1.ScheduleRun, error) {
	resp, err := c.schedules.ListScheduleRuns(ctx, &leaseholdv1.ListScheduleRunsRequest{Schedule: schedule, PageSize: limit})
	if err != nil {
		return nil, fmt.Errorf("leasehold: list runs of schedule %q: %w", schedule, err)
	}
	return resp.GetRuns(), nil
}
